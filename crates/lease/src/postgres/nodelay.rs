//! `TCP_NODELAY` on the store's connections. sqlx 0.9.0 stopped setting it (its issue #4335,
//! fixed upstream after that release), so a request written in more than one piece (a TLS
//! connection writes one record per 16 KiB: a renewal of 1,000 leases is three) waited for the
//! server's delayed acknowledgement, 40 ms on loopback: renewals took 50–100 ms instead of 10.
//!
//! sqlx gives no access to its socket, so [`set_on_every_tcp_socket`] sets the option on every
//! TCP socket of the process, reached through a duplicate of each descriptor taken with
//! `pidfd_getfd(2)` (no unsafe code: the duplicate is owned). Socket options belong to the
//! socket, not the descriptor, so the original connection gets it. Harmless for the process's
//! other TCP sockets, where it is what latency-sensitive servers set anyway. Where the kernel or a
//! sandbox refuses `pidfd_getfd`, nothing changes and the store works as before.

use rustix::process::{PidfdFlags, PidfdGetfdFlags, getpid, pidfd_getfd, pidfd_open};

/// Sets `TCP_NODELAY` on every TCP socket the process has open; returns how many it set.
pub fn set_on_every_tcp_socket() -> usize {
    let Ok(pidfd) = pidfd_open(getpid(), PidfdFlags::empty()) else {
        return 0;
    };
    let Ok(entries) = std::fs::read_dir("/proc/self/fd") else {
        return 0;
    };
    let mut set = 0;
    for entry in entries.flatten() {
        let Some(fd) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        // Sockets only (the link reads `socket:[inode]`); a descriptor closed meanwhile fails
        // here or below and is skipped.
        let is_socket = std::fs::read_link(entry.path())
            .is_ok_and(|target| target.to_string_lossy().starts_with("socket:"));
        if !is_socket {
            continue;
        }
        let Ok(socket) = pidfd_getfd(&pidfd, fd, PidfdGetfdFlags::empty()) else {
            continue;
        };
        // Not a TCP socket (a Unix socket, the listener's UDP): the call fails, nothing is set.
        if rustix::net::sockopt::set_tcp_nodelay(&socket, true).is_ok() {
            set += 1;
        }
    }
    set
}
