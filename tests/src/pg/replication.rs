//! Streaming replication for failover tests: a hot standby of a server this process started
//! (`pg_basebackup -R`), promoted while its primary is killed, as a failover manager would.

use std::process::Command;

use anyhow::Context;
use sqlx::Connection;

use super::{LocalServer, Postgres, free_port, run, server_command, server_options};

impl Postgres {
    /// A streaming standby of this server (which this process must have started), on a port of
    /// its own, following it asynchronously as replication does by default. Stopped when the test
    /// process exits.
    pub fn start_standby(&self) -> anyhow::Result<Postgres> {
        let primary = self.local()?;
        let dir = tempfile::Builder::new()
            .prefix("leasehold-pg-standby-")
            .tempdir()?
            .keep();
        if let Some(user) = &primary.run_as {
            run(Command::new("chown").arg("-R").arg(user).arg(&dir))?;
        }
        let data = dir.join("data");
        let mut backup = server_command(&primary.run_as, &primary.bin.join("pg_basebackup"));
        backup
            .args(["-h", "127.0.0.1", "-p", &primary.port.to_string()])
            .args([
                "-U",
                "postgres",
                "-X",
                "stream",
                "-R",
                "--no-sync",
                "-c",
                "fast",
                "-D",
            ])
            .arg(&data);
        run(&mut backup).context("pg_basebackup")?;
        super::make_tls_certificate(&dir, primary.run_as.as_deref());
        super::spawn_watchdog(&primary.run_as, &primary.bin, &dir)?;
        let port = free_port()?;
        let mut ctl = server_command(&primary.run_as, &primary.bin.join("pg_ctl"));
        ctl.arg("-D")
            .arg(&data)
            .arg("-l")
            .arg(dir.join("server.log"))
            .args(["-w", "-t", "60", "-o"])
            .arg(server_options(port, &dir, super::fsync_wanted()))
            .arg("start");
        run(&mut ctl).context("starting the standby")?;
        Ok(Postgres {
            admin_url: format!("postgres://postgres@127.0.0.1:{port}/postgres"),
            local: Some(LocalServer {
                bin: primary.bin.clone(),
                data,
                port,
                run_as: primary.run_as.clone(),
            }),
        })
    }

    /// Ends the standby's recovery: it becomes a primary on a new timeline, with whatever WAL it
    /// had received.
    pub fn promote(&self) -> anyhow::Result<()> {
        self.pg_ctl(&["-w", "-t", "60", "promote"])
    }

    /// Immediate shutdown: the server's processes quit at once, as in a crash (crash recovery at
    /// the next start).
    pub fn kill(&self) -> anyhow::Result<()> {
        self.pg_ctl(&["-m", "immediate", "-w", "stop"])
    }

    /// The port the server listens on (127.0.0.1).
    pub fn port(&self) -> anyhow::Result<u16> {
        Ok(self.local()?.port)
    }

    /// The URL of database `name` on this server, as the superuser.
    pub fn url_of(&self, name: &str) -> String {
        super::database_url(&self.admin_url, name)
    }

    fn pg_ctl(&self, args: &[&str]) -> anyhow::Result<()> {
        let local = self.local()?;
        let mut ctl = server_command(&local.run_as, &local.bin.join("pg_ctl"));
        ctl.arg("-D").arg(&local.data).args(args);
        run(&mut ctl)
    }

    fn local(&self) -> anyhow::Result<&LocalServer> {
        self.local
            .as_ref()
            .context("DATABASE_URL was given: the tests do not own that server")
    }
}

impl Postgres {
    /// Cuts a standby off from its primary (no more WAL arrives): what it has not received by now,
    /// it will not have when promoted, as after a failover with asynchronous replication.
    pub async fn detach_standby(&self) -> anyhow::Result<()> {
        let mut conn = sqlx::PgConnection::connect(&self.admin_url).await?;
        // Two statements: ALTER SYSTEM refuses to run in the implicit transaction of a batch.
        sqlx::raw_sql("ALTER SYSTEM SET primary_conninfo = ''")
            .execute(&mut conn)
            .await?;
        sqlx::raw_sql("SELECT pg_reload_conf()")
            .execute(&mut conn)
            .await?;
        crate::eventually::eventually(
            "the standby's WAL receiver to stop",
            std::time::Duration::from_secs(20),
            async || {
                let receiving: i64 =
                    sqlx::query_scalar("SELECT count(*) FROM pg_stat_wal_receiver")
                        .fetch_one(&mut conn)
                        .await
                        .map_err(|e| e.to_string())?;
                crate::eventually::when(receiving, |n| *n == 0).map_err(|n| n.to_string())
            },
        )
        .await?;
        Ok(())
    }

    /// Waits until this standby has replayed everything its primary at `primary_url` has
    /// written so far.
    pub async fn wait_for_replay(&self, primary_url: &str) -> anyhow::Result<()> {
        let mut primary = sqlx::PgConnection::connect(primary_url).await?;
        let target: String = sqlx::query_scalar("SELECT pg_current_wal_lsn()::text")
            .fetch_one(&mut primary)
            .await?;
        let mut conn = sqlx::PgConnection::connect(&self.admin_url).await?;
        crate::eventually::eventually(
            "the standby to replay its primary's WAL",
            std::time::Duration::from_secs(20),
            async || {
                let caught_up: bool =
                    sqlx::query_scalar("SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn")
                        .bind(&target)
                        .fetch_one(&mut conn)
                        .await
                        .map_err(|e| e.to_string())?;
                crate::eventually::when(caught_up, |c| *c).map_err(|c| c.to_string())
            },
        )
        .await?;
        Ok(())
    }
}
