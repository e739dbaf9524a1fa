-- Each member's shard count for its group, written by every heartbeat: replicas configured with
-- different counts for one group (a rolling change of the count) would otherwise each plan the
-- shards their own way and move the shards between them for as long as both run. A member sees
-- the others' counts and takes part only while its count is the one in force (the
-- longest-standing member's). NULL: a row written by a version that did not record it.
ALTER TABLE leasehold_members ADD COLUMN shards INTEGER;
