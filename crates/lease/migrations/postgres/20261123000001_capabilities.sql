-- Plugin capabilities (WIT `kv` and `sql`, DESIGN §1.3).

-- The fenced key-value entries of plugins, scoped by plugin name. "C" collation: keys sort by
-- bytes, so prefix listings and their pagination do not depend on the server's locale.
CREATE TABLE IF NOT EXISTS leasehold_kv (
    plugin     TEXT COLLATE "C" NOT NULL,
    key        TEXT COLLATE "C" NOT NULL,
    value      BYTEA            NOT NULL,
    lease      TEXT             NOT NULL,  -- the lease and epoch of the write that set the value
    epoch      BIGINT           NOT NULL,
    updated_at TIMESTAMPTZ      NOT NULL,
    PRIMARY KEY (plugin, key)
);

-- One random id per lease database. A plugin's sql grant compares it with the id the lease store
-- reads, so it knows whether its writes must be fenced whatever URL, host name or role reaches the
-- database.
CREATE TABLE IF NOT EXISTS leasehold_database (
    one_row BOOLEAN PRIMARY KEY DEFAULT true CHECK (one_row),
    id      TEXT    NOT NULL
);
INSERT INTO leasehold_database (id)
    VALUES (md5(random()::text || clock_timestamp()::text || pg_backend_pid()::text))
    ON CONFLICT (one_row) DO NOTHING;
