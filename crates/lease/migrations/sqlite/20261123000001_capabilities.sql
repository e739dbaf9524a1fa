-- Plugin capabilities (WIT `kv`, DESIGN §1.3): the fenced key-value entries of plugins, scoped
-- by plugin name. Keys compare as bytes (SQLite's default BINARY collation).
CREATE TABLE IF NOT EXISTS leasehold_kv (
    plugin        TEXT    NOT NULL,
    key           TEXT    NOT NULL,
    value         BLOB    NOT NULL,
    lease         TEXT    NOT NULL,  -- the lease and epoch of the write that set the value
    epoch         INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL,
    PRIMARY KEY (plugin, key)
) STRICT;
