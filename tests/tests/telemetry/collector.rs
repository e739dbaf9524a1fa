//! A collector that accepts and never answers, or is down, costs no lease: a host holding 1,000
//! leases exports to it for a minute, keeps every lease at its epoch, and counts what it could
//! not send in `/metrics`.
