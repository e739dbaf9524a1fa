-- The application table orphan-sweeper works on (rename it with the `table` config key).
-- Each backend heartbeats its sandboxes:
--     UPDATE sandboxes SET last_heartbeat = now() WHERE backend = $1;
-- and may wake the sweeper at once after a change:
--     NOTIFY sandbox_events;
CREATE TABLE IF NOT EXISTS sandboxes (
    id             text        PRIMARY KEY,
    backend        text        NOT NULL,
    last_heartbeat timestamptz NOT NULL DEFAULT now(),
    state          text        NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'orphaned')),
    orphaned_at    timestamptz,
    swept_epoch    bigint      -- fencing epoch of the sweep that last changed the row
);
