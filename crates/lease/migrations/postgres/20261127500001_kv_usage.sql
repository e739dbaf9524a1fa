-- What each plugin keeps in kv (keys, and bytes of keys plus values), kept exact by a trigger on
-- every write, so that a put checks the plugin's quota with one row lookup instead of a scan.
CREATE TABLE IF NOT EXISTS leasehold_kv_usage (
    plugin TEXT COLLATE "C" PRIMARY KEY,
    keys   BIGINT NOT NULL,
    bytes  BIGINT NOT NULL
);

CREATE OR REPLACE FUNCTION leasehold_kv_count() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        UPDATE leasehold_kv_usage
           SET keys = keys - 1, bytes = bytes - octet_length(OLD.key) - octet_length(OLD.value)
         WHERE plugin = OLD.plugin;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        INSERT INTO leasehold_kv_usage AS u (plugin, keys, bytes)
             VALUES (NEW.plugin, 1, octet_length(NEW.key) + octet_length(NEW.value))
        ON CONFLICT (plugin) DO UPDATE SET keys = u.keys + 1, bytes = u.bytes + EXCLUDED.bytes;
    END IF;
    RETURN NULL;
END
$$;

-- The trigger first: creating it locks out writers until this migration commits, so the counts
-- below miss no write.
DROP TRIGGER IF EXISTS leasehold_kv_count ON leasehold_kv;
CREATE TRIGGER leasehold_kv_count AFTER INSERT OR UPDATE OR DELETE ON leasehold_kv
    FOR EACH ROW EXECUTE FUNCTION leasehold_kv_count();

INSERT INTO leasehold_kv_usage (plugin, keys, bytes)
    SELECT plugin, count(*), sum(octet_length(key) + octet_length(value))
      FROM leasehold_kv GROUP BY plugin
    ON CONFLICT (plugin) DO UPDATE SET keys = EXCLUDED.keys, bytes = EXCLUDED.bytes;
