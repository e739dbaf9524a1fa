-- What the host role needs, once `leasehold migrate` has created the tables (run as a superuser or
-- as leasehold_owner). Re-run after upgrading to a release that adds tables.
--
-- leasehold_leases: campaign (INSERT … ON CONFLICT DO UPDATE), renew and release (UPDATE); rows
-- are never deleted (a trigger refuses it). The fence's SELECT … FOR SHARE also needs UPDATE.
GRANT SELECT, INSERT, UPDATE ON leasehold_leases TO leasehold;
-- leasehold_terms: each lease's recent terms, for /status and the page: a campaign opens one,
-- closes the one before and deletes the oldest; a release closes its own.
GRANT SELECT, INSERT, UPDATE, DELETE ON leasehold_terms TO leasehold;
-- leasehold_fence_key: the key the host passes to leasehold_fence(), the function that fences a
-- plugin's sql transaction. Only the host's role may read it; a plugin's role gets nothing here.
GRANT SELECT ON leasehold_fence_key TO leasehold;
-- leasehold_incarnation: which incarnation of the database (system identifier, timeline) the
-- leases were last campaigned in; a campaign records a new one after a failover.
GRANT SELECT, UPDATE ON leasehold_incarnation TO leasehold;
-- leasehold_members: the members of lease groups; a heartbeat upserts this replica's row and
-- deletes lapsed ones of its group, and a graceful stop deletes its own.
GRANT SELECT, INSERT, UPDATE, DELETE ON leasehold_members TO leasehold;
-- leasehold_waiters: the line of standbys for each lease; a campaign upserts this replica's place
-- and deletes lapsed ones, and a release or a campaign deletes the place of the waiter it gives
-- the lease to.
GRANT SELECT, INSERT, UPDATE, DELETE ON leasehold_waiters TO leasehold;
-- leasehold_kv: the plugins' fenced key-value store.
GRANT SELECT, INSERT, UPDATE, DELETE ON leasehold_kv TO leasehold;
-- leasehold_kv_usage: each plugin's kv usage, kept by a trigger on leasehold_kv and read
-- FOR UPDATE by a put checking the plugin's quota.
GRANT SELECT, INSERT, UPDATE ON leasehold_kv_usage TO leasehold;
-- leasehold_database: the database's id, which tells sql grants they reach the lease database;
-- _sqlx_migrations: read at start-up to confirm the schema is current.
GRANT SELECT ON leasehold_database, _sqlx_migrations TO leasehold;
-- leasehold_protocol(): the lowest lease protocol the schema accepts, read as a host starts.
GRANT EXECUTE ON FUNCTION leasehold_protocol() TO leasehold;
--
-- A plugin's [grants.sql] role on this database gets none of the above: USAGE on the schema is
-- all it needs of leasehold (the fence and the database's id are functions of the owner), plus
-- whatever it needs on its own tables. The host refuses a grant whose role holds anything on a
-- leasehold_* table. For example:
--   CREATE ROLE sweeper LOGIN;
--   GRANT USAGE ON SCHEMA public TO sweeper;
--   GRANT SELECT, UPDATE, DELETE ON sandboxes TO sweeper;
