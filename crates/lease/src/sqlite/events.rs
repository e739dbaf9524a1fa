//! Wake-ups between the replicas of one SQLite lease file: SQLite has no `NOTIFY`, so a release
//! (and a handoff request) is announced by appending a line to an *event file* beside the
//! database (`leasehold.db-events`), which every replica of the file watches with inotify.
//!
//! Why a file watched with inotify, and not the alternatives:
//! - a directory of Unix datagram sockets, one per replica, needs every sender to list it and
//!   send to each, and a replica that crashed leaves a socket that someone must tell from a live
//!   one and remove; and containers sharing only the lease file's volume would need it too;
//! - polling `PRAGMA data_version` on a timer costs every idle replica a read per tick, wakes on
//!   every renewal of every replica (each commit moves it) and is only as quick as the tick;
//! - a file beside the database lives where SQLite already needs to write (its `-wal` and
//!   `-shm` files are there), so it works wherever the lease file does, containers sharing the
//!   volume included (inotify sees writes from every process on the kernel); nothing is left
//!   behind by a crash (a line read by nobody is harmless); each replica holds one watch however
//!   many there are, and is woken only by releases and handoff requests, not by renewals.
//!
//! Missed wake-ups are harmless, as on PostgreSQL: standbys still campaign at the holder's expiry
//! and poll. So the file is kept simple: writers append one line per lease (one `write`, atomic
//! under `O_APPEND`), a batch too long for one small write becomes one line that wakes every lease,
//! and a file grown past [`MAX_BYTES`] is truncated by the next writer; a listener that finds it
//! shorter than what it read (or replaced) reports [`ReleaseNotice::Resubscribed`].
//!
//! Whoever may write the lease file's directory may put something else at the event file's path.
//! So the file is opened without following a link and without waiting (a FIFO would hold the
//! open until someone opened its other end), and used only when what was opened is a regular
//! file: a link, FIFO, socket, device or directory there is refused, naming it, and nothing is
//! written through it. A line longer than any writer writes is dropped unread, so a writer that
//! never ends its line costs a listener [`MAX_LINE`] bytes at most.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::time::Instant;

use rustix::fs::{Mode, OFlags};

use notify::{RecursiveMode, Watcher};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::store::{Epoch, ReleaseNotice};

/// The size past which the next writer truncates the file: a few hundred releases. Listeners read
/// each line within milliseconds of its write, so only a listener that is not keeping up can miss
/// a truncation, and it then misses wake-ups only, which polling covers.
pub const MAX_BYTES: u64 = 64 * 1024;

/// The longest batch written as lines: one `write` of at most a page, which no reader can see
/// half-done across another writer's. A longer batch (a replica giving up many shards) is
/// announced as one line that wakes every lease, as a look at every lease is what it asks for.
const MAX_WRITE: usize = 4096;

/// The longest line a listener keeps while waiting for its end: no writer writes a line longer
/// than one write. A longer one is dropped, and the rest of it up to its newline skipped.
pub const MAX_LINE: usize = MAX_WRITE;

/// How often at most a listener reports the lines it dropped as too long: one line for a flood,
/// not one per line.
const DROP_REPORT_INTERVAL: Duration = Duration::from_secs(10);

/// What a line of the event file says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wakeup {
    /// `released NAME`: the lease was released (by its holder, or forced).
    Released(String),
    /// `handoff EPOCH NAME`: the holder of the lease at that epoch is asked to hand it over.
    Handoff {
        /// The lease.
        lease: String,
        /// The epoch whose holder is asked.
        epoch: Epoch,
    },
    /// `granted EPOCH NAME HOLDER`: the lease was given to that waiter at that epoch.
    Granted {
        /// The lease.
        lease: String,
        /// The waiter's holder id.
        holder: String,
        /// The epoch given.
        epoch: Epoch,
    },
    /// `all`: many leases at once; look at every one.
    All,
}

impl Wakeup {
    /// The line, newline included.
    fn line(&self) -> String {
        match self {
            Wakeup::Released(lease) => format!("released {lease}\n"),
            Wakeup::Handoff { lease, epoch } => format!("handoff {epoch} {lease}\n"),
            Wakeup::Granted {
                lease,
                holder,
                epoch,
            } => format!("granted {epoch} {lease} {holder}\n"),
            Wakeup::All => "all\n".to_string(),
        }
    }

    /// A line without its newline; `None` for one this version does not know (written by a newer
    /// one, or a torn read after a truncation): such a line wakes nothing, harmlessly.
    pub fn parse(line: &str) -> Option<Wakeup> {
        let mut words = line.split(' ');
        let wakeup = match words.next()? {
            "released" => Wakeup::Released(words.next().filter(|n| !n.is_empty())?.to_string()),
            "handoff" => {
                let epoch = Epoch::new(words.next()?.parse().ok()?);
                let lease = words.next().filter(|n| !n.is_empty())?.to_string();
                Wakeup::Handoff { lease, epoch }
            }
            "granted" => {
                let epoch = Epoch::new(words.next()?.parse().ok()?);
                let lease = words.next().filter(|n| !n.is_empty())?.to_string();
                let holder = words.next().filter(|n| !n.is_empty())?.to_string();
                Wakeup::Granted {
                    lease,
                    holder,
                    epoch,
                }
            }
            "all" => Wakeup::All,
            _ => return None,
        };
        words.next().is_none().then_some(wakeup)
    }

    /// What the lease driver hears of it.
    fn notice(self) -> ReleaseNotice {
        match self {
            Wakeup::Released(lease) => ReleaseNotice::Released(lease),
            Wakeup::Handoff { lease, epoch } => ReleaseNotice::HandoffRequested { lease, epoch },
            Wakeup::Granted {
                lease,
                holder,
                epoch,
            } => ReleaseNotice::Granted {
                lease,
                holder,
                epoch,
            },
            Wakeup::All => ReleaseNotice::Resubscribed,
        }
    }
}

/// Why the event file could not be written or watched. Never fatal: the replicas then poll.
#[derive(Debug, thiserror::Error)]
pub enum EventFileError {
    /// The file could not be created, opened, read or written.
    #[error("event file {}: {source}", path.display())]
    Io {
        /// The event file.
        path: PathBuf,
        /// What the filesystem said.
        #[source]
        source: std::io::Error,
    },
    /// Something other than a regular file is at the event file's path: nothing is written
    /// through it, truncated or read.
    #[error(
        "the event file {} is {found}, not a regular file: refused, and nothing is written through it; remove it, and leasehold creates the file",
        path.display()
    )]
    NotAFile {
        /// The event file.
        path: PathBuf,
        /// What is there: `a symbolic link to …`, `a FIFO`, `a directory`, ….
        found: String,
    },
    /// inotify refused the watch (e.g. `max_user_watches` reached).
    #[error("cannot watch the event file {}: {source}", path.display())]
    Watch {
        /// The event file.
        path: PathBuf,
        /// What the watcher said.
        #[source]
        source: notify::Error,
    },
}

/// The event file of one SQLite lease file.
#[derive(Debug, Clone)]
pub struct EventFile {
    /// `<database>-events`.
    path: PathBuf,
}

impl EventFile {
    /// The event file of the lease file `database`: its name with `-events`, beside it, as SQLite
    /// names its `-wal` and `-shm` files.
    pub fn beside(database: &Path) -> EventFile {
        let mut name = database.as_os_str().to_os_string();
        name.push("-events");
        EventFile {
            path: PathBuf::from(name),
        }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn io(&self) -> impl Fn(std::io::Error) -> EventFileError + '_ {
        |source| EventFileError::Io {
            path: self.path.clone(),
            source,
        }
    }

    /// Opens the file for appending, creating it with the lease file's permissions (it says only
    /// which leases moved, but replicas of several users share it as they share the lease file).
    fn open_append(&self) -> Result<File, EventFileError> {
        let mode = self
            .path
            .to_str()
            .and_then(|p| p.strip_suffix("-events"))
            .and_then(|db| std::fs::metadata(db).ok())
            .map_or(0o600, |m| m.mode() & 0o666);
        self.open(OFlags::WRONLY | OFlags::APPEND | OFlags::CREATE, mode)
    }

    /// Opens the path with `flags`, neither following a link (`O_NOFOLLOW`: a link there, even
    /// one to nowhere, fails rather than reaching its target) nor waiting (`O_NONBLOCK`: a FIFO
    /// opens, or fails, at once), and checks that what it opened is a regular file before anyone
    /// reads, writes or truncates through it. `mode` is that of a file it creates.
    fn open(&self, flags: OFlags, mode: u32) -> Result<File, EventFileError> {
        let flags = flags | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
        let fd = match rustix::fs::open(self.path.as_path(), flags, Mode::from_raw_mode(mode)) {
            Ok(fd) => fd,
            // A link (ELOOP), a FIFO nobody reads or a socket (ENXIO), a directory (EISDIR),
            // said by what is there rather than by the errno.
            Err(errno) => {
                return Err(match self.not_a_file() {
                    Some(refused) => refused,
                    None => self.io()(errno.into()),
                });
            }
        };
        let file = File::from(fd);
        let meta = file.metadata().map_err(self.io())?;
        if !meta.file_type().is_file() {
            return Err(EventFileError::NotAFile {
                path: self.path.clone(),
                found: describe(&meta.file_type(), None),
            });
        }
        Ok(file)
    }

    /// What is at the path when it is not a regular file, as [`EventFileError::NotAFile`].
    fn not_a_file(&self) -> Option<EventFileError> {
        let meta = std::fs::symlink_metadata(&self.path).ok()?;
        let kind = meta.file_type();
        if kind.is_file() {
            return None;
        }
        let target = kind
            .is_symlink()
            .then(|| std::fs::read_link(&self.path).ok())
            .flatten();
        Some(EventFileError::NotAFile {
            path: self.path.clone(),
            found: describe(&kind, target.as_deref()),
        })
    }

    /// Creates the file if it is missing, so that replicas can watch it before anyone releases.
    pub fn create(&self) -> Result<(), EventFileError> {
        self.open_append().map(drop)
    }

    /// Appends `wakeups` in one write, after the statement that made them has committed (a
    /// standby woken before would find the lease still held). Truncates the file first when it
    /// has grown past [`MAX_BYTES`].
    pub fn announce(&self, wakeups: &[Wakeup]) -> Result<(), EventFileError> {
        if wakeups.is_empty() {
            return Ok(());
        }
        let mut text: String = wakeups.iter().map(Wakeup::line).collect();
        if text.len() > MAX_WRITE {
            text = Wakeup::All.line();
        }
        let mut file = self.open_append()?;
        if file.metadata().map_err(self.io())?.len() > MAX_BYTES {
            file.set_len(0).map_err(self.io())?;
        }
        file.write_all(text.as_bytes()).map_err(self.io())
    }

    /// Watches the file until `shutdown`, reporting each line appended by any replica (this one
    /// included) as a [`ReleaseNotice`]. The watch is in place when this returns: nothing
    /// appended afterwards is missed.
    pub fn listen(
        &self,
        shutdown: CancellationToken,
    ) -> Result<mpsc::Receiver<ReleaseNotice>, EventFileError> {
        let (pokes_tx, mut pokes) = mpsc::unbounded_channel();
        let mut watcher = notify::recommended_watcher(move |_: notify::Result<notify::Event>| {
            // What changed is read from the file itself.
            let _ = pokes_tx.send(());
        })
        .map_err(|source| EventFileError::Watch {
            path: self.path.clone(),
            source,
        })?;
        let mut reader = Reader::open(self)?;
        watcher
            .watch(&self.path, RecursiveMode::NonRecursive)
            .map_err(|source| EventFileError::Watch {
                path: self.path.clone(),
                source,
            })?;
        let (tx, rx) = mpsc::channel(256);
        let file = self.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    biased;
                    _ = shutdown.cancelled() => return,
                    poke = pokes.recv() => if poke.is_none() { return },
                }
                // Several writes may have been announced by one event, or one by several.
                while pokes.try_recv().is_ok() {}
                let mut notices = Vec::new();
                if !reader.is_current() {
                    // Removed or replaced (an operator's `rm`): watch the new file from its start.
                    match file.rewatch(&mut watcher) {
                        Ok(fresh) => reader = fresh,
                        Err(error) => {
                            warn!(%error, "release wake-ups stopped: standbys of this SQLite file poll");
                            return;
                        }
                    }
                    notices.push(ReleaseNotice::Resubscribed);
                }
                match reader.read_new() {
                    Ok(read) => notices.extend(read),
                    Err(error) => {
                        debug!(%error, "reading the event file failed; looking at every lease");
                        notices.push(ReleaseNotice::Resubscribed);
                    }
                }
                for notice in notices {
                    // The driver is gone: nobody needs wake-ups any more.
                    if tx.send(notice).await.is_err() {
                        return;
                    }
                }
            }
        });
        Ok(rx)
    }

    /// Creates the file again if it is missing, and moves the watch to it.
    fn rewatch(&self, watcher: &mut notify::RecommendedWatcher) -> Result<Reader, EventFileError> {
        let _ = watcher.unwatch(&self.path);
        self.create()?;
        let mut reader = Reader::open(self)?;
        reader.offset = 0;
        watcher
            .watch(&self.path, RecursiveMode::NonRecursive)
            .map_err(|source| EventFileError::Watch {
                path: self.path.clone(),
                source,
            })?;
        Ok(reader)
    }
}

/// A listener's place in the event file.
struct Reader {
    /// Where the file is.
    file: EventFile,
    /// The file as opened (the same inode while nobody replaces it).
    handle: File,
    /// Bytes read so far.
    offset: u64,
    /// The start of a line whose end has not been written yet, at most [`MAX_LINE`] bytes.
    partial: Vec<u8>,
    /// The line being read is longer than [`MAX_LINE`]: skip to its newline.
    skipping: bool,
    /// The lines dropped as too long, and when that was last reported.
    dropped: Dropped,
}

/// Lines a listener dropped as longer than [`MAX_LINE`]: counted, and reported at most every
/// [`DROP_REPORT_INTERVAL`].
#[derive(Debug, Default)]
struct Dropped {
    /// Lines dropped since the last report.
    lines: u64,
    /// Their bytes, as far as they were read.
    bytes: u64,
    /// Lines dropped since the listener started.
    total: u64,
    /// When the last report was made.
    reported: Option<Instant>,
}

impl Dropped {
    /// Counts a dropped line of `bytes` so far.
    fn line(&mut self, bytes: usize) {
        self.lines += 1;
        self.total += 1;
        self.bytes += bytes as u64;
    }

    /// Counts more bytes of the line being dropped.
    fn more(&mut self, bytes: usize) {
        self.bytes += bytes as u64;
    }

    /// Logs what was dropped since the last report, unless that was within
    /// [`DROP_REPORT_INTERVAL`].
    fn report(&mut self, path: &Path) {
        let now = crate::seams::now();
        if self.lines == 0
            || self
                .reported
                .is_some_and(|at| now < at + DROP_REPORT_INTERVAL)
        {
            return;
        }
        warn!(
            path = %path.display(),
            lines = self.lines,
            bytes = self.bytes,
            total = self.total,
            "event file lines longer than {MAX_LINE} bytes dropped: no replica writes such a line, so another process wrote them"
        );
        self.reported = Some(now);
        self.lines = 0;
        self.bytes = 0;
    }
}

/// What a file type is, for [`EventFileError::NotAFile`]; `target`, a link's.
fn describe(kind: &std::fs::FileType, target: Option<&Path>) -> String {
    if kind.is_symlink() {
        return match target {
            Some(target) => format!("a symbolic link to {}", target.display()),
            None => "a symbolic link".to_string(),
        };
    }
    let what = if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else {
        "not a regular file"
    };
    what.to_string()
}

impl Reader {
    /// Opens the file at its end: what was announced before the listener started is old news.
    fn open(file: &EventFile) -> Result<Reader, EventFileError> {
        let handle = file.open(OFlags::RDONLY, 0)?;
        let offset = handle.metadata().map_err(file.io())?.len();
        Ok(Reader {
            file: file.clone(),
            handle,
            offset,
            partial: Vec::new(),
            skipping: false,
            dropped: Dropped::default(),
        })
    }

    /// Whether the path still names the file this reader has open (not a link put in its place,
    /// even one to that file).
    fn is_current(&self) -> bool {
        match (
            std::fs::symlink_metadata(&self.file.path),
            self.handle.metadata(),
        ) {
            (Ok(at_path), Ok(open)) => at_path.ino() == open.ino() && at_path.dev() == open.dev(),
            _ => false,
        }
    }

    /// What was appended since the last read, as notices; a truncation (the file is shorter than
    /// what was read) is reported as [`ReleaseNotice::Resubscribed`] and read from its start.
    fn read_new(&mut self) -> Result<Vec<ReleaseNotice>, EventFileError> {
        let mut notices = Vec::new();
        let len = self.handle.metadata().map_err(self.file.io())?.len();
        if len < self.offset {
            notices.push(ReleaseNotice::Resubscribed);
            self.offset = 0;
            self.partial.clear();
            self.skipping = false;
        }
        self.handle
            .seek(SeekFrom::Start(self.offset))
            .map_err(self.file.io())?;
        let mut bytes = Vec::new();
        let read = (&self.handle)
            .take(MAX_BYTES * 2)
            .read_to_end(&mut bytes)
            .map_err(self.file.io())?;
        self.offset += read as u64;
        let mut rest = &bytes[..];
        while !rest.is_empty() {
            let end = rest.iter().position(|b| *b == b'\n');
            let (piece, after) = match end {
                Some(i) => (&rest[..i], &rest[i + 1..]),
                None => (rest, &[][..]),
            };
            rest = after;
            if self.skipping {
                // The rest of a line already dropped.
                self.dropped.more(piece.len());
                self.skipping = end.is_none();
                continue;
            }
            if self.partial.len() + piece.len() > MAX_LINE {
                self.dropped.line(self.partial.len() + piece.len());
                self.partial.clear();
                self.skipping = end.is_none();
                continue;
            }
            self.partial.extend_from_slice(piece);
            if end.is_some() {
                let line = std::mem::take(&mut self.partial);
                let line = String::from_utf8_lossy(&line);
                let line = line.strip_suffix('\r').unwrap_or(&line);
                notices.extend(Wakeup::parse(line).map(Wakeup::notice));
            }
        }
        self.dropped.report(&self.file.path);
        Ok(notices)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_say_which_lease_was_released_or_asked_to_hand_over() {
        for wakeup in [
            Wakeup::Released("orders/7".into()),
            Wakeup::Handoff {
                lease: "leader".into(),
                epoch: Epoch::new(42),
            },
            Wakeup::Granted {
                lease: "leader".into(),
                holder: "r2-0a1b2c3d".into(),
                epoch: Epoch::new(43),
            },
            Wakeup::All,
        ] {
            let line = wakeup.line();
            assert!(line.ends_with('\n'));
            assert_eq!(Wakeup::parse(line.trim_end()), Some(wakeup));
        }
        for junk in [
            "",
            "released",
            "released ",
            "handoff x a",
            "handoff 1",
            "ease a",
            "all x",
        ] {
            assert_eq!(Wakeup::parse(junk), None, "{junk:?}");
        }
    }

    #[tokio::test]
    async fn a_listener_hears_each_line_appended_after_it_started_and_a_truncation() {
        let dir = tempfile::tempdir().unwrap();
        let file = EventFile::beside(&dir.path().join("leases.db"));
        file.create().unwrap();
        file.announce(&[Wakeup::Released("before".into())]).unwrap();
        let stop = CancellationToken::new();
        let mut rx = file.listen(stop.clone()).unwrap();
        let next = async |rx: &mut mpsc::Receiver<ReleaseNotice>| {
            tokio::time::timeout(std::time::Duration::from_secs(5), rx.recv())
                .await
                .unwrap()
                .unwrap()
        };
        file.announce(&[
            Wakeup::Released("a".into()),
            Wakeup::Handoff {
                lease: "b".into(),
                epoch: Epoch::new(3),
            },
        ])
        .unwrap();
        assert_eq!(next(&mut rx).await, ReleaseNotice::Released("a".into()));
        assert_eq!(
            next(&mut rx).await,
            ReleaseNotice::HandoffRequested {
                lease: "b".into(),
                epoch: Epoch::new(3)
            }
        );
        // A batch too long for one small write wakes every lease.
        let many: Vec<Wakeup> = (0..1000)
            .map(|i| Wakeup::Released(format!("shard/{i}")))
            .collect();
        file.announce(&many).unwrap();
        assert_eq!(next(&mut rx).await, ReleaseNotice::Resubscribed);
        // Grown past its bound, the file is truncated by the next writer; the listener says so.
        std::fs::OpenOptions::new()
            .append(true)
            .open(file.path())
            .unwrap()
            .set_len(MAX_BYTES + 1)
            .unwrap();
        file.announce(&[Wakeup::Released("c".into())]).unwrap();
        let mut heard = Vec::new();
        while heard.last() != Some(&ReleaseNotice::Released("c".into())) {
            heard.push(next(&mut rx).await);
        }
        assert!(heard.contains(&ReleaseNotice::Resubscribed), "{heard:?}");
        // Removed by hand: watched again from its start.
        std::fs::remove_file(file.path()).unwrap();
        let mut heard = Vec::new();
        while heard.last() != Some(&ReleaseNotice::Resubscribed) {
            heard.push(next(&mut rx).await);
        }
        file.announce(&[Wakeup::Released("d".into())]).unwrap();
        assert_eq!(next(&mut rx).await, ReleaseNotice::Released("d".into()));
        stop.cancel();
    }

    #[test]
    fn a_link_fifo_or_directory_at_the_path_is_refused_and_its_target_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim.txt");
        std::fs::write(&victim, "x".repeat(70_000)).unwrap();
        let linked = EventFile::beside(&dir.path().join("linked.db"));
        std::os::unix::fs::symlink(&victim, linked.path()).unwrap();
        let dangling = EventFile::beside(&dir.path().join("dangling.db"));
        let nowhere = dir.path().join("created-by-host.txt");
        std::os::unix::fs::symlink(&nowhere, dangling.path()).unwrap();
        let fifo = EventFile::beside(&dir.path().join("fifo.db"));
        rustix::fs::mknodat(
            rustix::fs::CWD,
            fifo.path(),
            rustix::fs::FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        let directory = EventFile::beside(&dir.path().join("dir.db"));
        std::fs::create_dir(directory.path()).unwrap();
        for (file, found) in [
            (&linked, format!("a symbolic link to {}", victim.display())),
            (
                &dangling,
                format!("a symbolic link to {}", nowhere.display()),
            ),
            (&fifo, "a FIFO".to_string()),
            (&directory, "a directory".to_string()),
        ] {
            for refused in [
                file.create().unwrap_err(),
                file.announce(&[Wakeup::Released("a".into())]).unwrap_err(),
                Reader::open(file).err().unwrap(),
            ] {
                let text = refused.to_string();
                assert!(
                    text.contains(&file.path().display().to_string()) && text.contains(&found),
                    "{text}"
                );
            }
        }
        assert_eq!(std::fs::read(&victim).unwrap().len(), 70_000);
        assert!(!nowhere.exists());
    }

    #[test]
    fn a_line_longer_than_any_writer_writes_is_dropped_and_the_next_one_read() {
        let dir = tempfile::tempdir().unwrap();
        let file = EventFile::beside(&dir.path().join("leases.db"));
        file.create().unwrap();
        let mut reader = Reader::open(&file).unwrap();
        let mut raw = std::fs::OpenOptions::new()
            .append(true)
            .open(file.path())
            .unwrap();
        // Without its newline, in pieces: never more than MAX_LINE kept.
        for _ in 0..100 {
            raw.write_all(&[b'x'; 1000]).unwrap();
            assert!(reader.read_new().unwrap().is_empty());
            assert!(reader.partial.len() <= MAX_LINE);
        }
        raw.write_all(b"xx\nreleased a\nreleased b").unwrap();
        assert_eq!(
            reader.read_new().unwrap(),
            vec![ReleaseNotice::Released("a".into())]
        );
        raw.write_all(b"\n").unwrap();
        assert_eq!(
            reader.read_new().unwrap(),
            vec![ReleaseNotice::Released("b".into())]
        );
        assert_eq!(reader.dropped.total, 1);
    }
}
