-- What each plugin keeps in kv (keys, and bytes of keys plus values), kept exact by triggers on
-- every write, so that a put checks the plugin's quota with one row lookup instead of a scan.
-- Bytes of a key are those of its UTF-8 text (length() of TEXT counts characters).
CREATE TABLE IF NOT EXISTS leasehold_kv_usage (
    plugin TEXT    PRIMARY KEY,
    keys   INTEGER NOT NULL,
    bytes  INTEGER NOT NULL
) STRICT;

CREATE TRIGGER IF NOT EXISTS leasehold_kv_count_insert AFTER INSERT ON leasehold_kv BEGIN
    INSERT INTO leasehold_kv_usage (plugin, keys, bytes)
         VALUES (NEW.plugin, 1, length(CAST(NEW.key AS BLOB)) + length(NEW.value))
    ON CONFLICT (plugin) DO UPDATE SET keys = keys + 1, bytes = bytes + excluded.bytes;
END;

CREATE TRIGGER IF NOT EXISTS leasehold_kv_count_update AFTER UPDATE ON leasehold_kv BEGIN
    UPDATE leasehold_kv_usage
       SET keys = keys - 1, bytes = bytes - length(CAST(OLD.key AS BLOB)) - length(OLD.value)
     WHERE plugin = OLD.plugin;
    INSERT INTO leasehold_kv_usage (plugin, keys, bytes)
         VALUES (NEW.plugin, 1, length(CAST(NEW.key AS BLOB)) + length(NEW.value))
    ON CONFLICT (plugin) DO UPDATE SET keys = keys + 1, bytes = bytes + excluded.bytes;
END;

CREATE TRIGGER IF NOT EXISTS leasehold_kv_count_delete AFTER DELETE ON leasehold_kv BEGIN
    UPDATE leasehold_kv_usage
       SET keys = keys - 1, bytes = bytes - length(CAST(OLD.key AS BLOB)) - length(OLD.value)
     WHERE plugin = OLD.plugin;
END;

-- A migration runs in one transaction, which holds the write lock: the counts miss no write.
INSERT INTO leasehold_kv_usage (plugin, keys, bytes)
    SELECT plugin, count(*), sum(length(CAST(key AS BLOB)) + length(value))
      FROM leasehold_kv WHERE true GROUP BY plugin
    ON CONFLICT (plugin) DO UPDATE SET keys = excluded.keys, bytes = excluded.bytes;
