//! Open-file descriptors. Every MCP connection takes one, and so do the data files, the
//! write-ahead log's segments, the channels to peers, the pipes of upstream processes and the
//! requests to issuers. A process out of them cannot accept: connections then wait in the
//! listen queue (behind idle ones) until a descriptor frees, and a new client waits with them.
//!
//! So at start the node raises its soft `RLIMIT_NOFILE` to the hard limit
//! ([`raise_soft_limit`]), and the listener keeps `http.max_connections` within the limit less
//! [`RESERVED_DESCRIPTORS`] ([`connection_limit`]), lowering it with a warning when it has to:
//! past it a connection is accepted and closed at once, and the descriptors never run out.

/// Descriptors kept for everything but MCP connections: the database and the write-ahead log,
/// peers, upstream processes, issuers, the metrics listener (docs/configuration.md, Fixed
/// limits).
pub const RESERVED_DESCRIPTORS: u64 = 256;

/// Raise the soft open-file limit to the hard one, and say so; the soft limit in force after,
/// `None` where the platform has none.
pub fn raise_soft_limit() -> Option<u64> {
    let (soft, hard) = limits::open_files()?;
    if soft >= hard {
        return Some(soft);
    }
    match limits::set_soft(hard) {
        Ok(()) => {
            tracing::info!(
                from = soft,
                to = hard,
                "raised the open-file limit (RLIMIT_NOFILE) from {soft} to {hard}"
            );
            Some(hard)
        }
        Err(e) => {
            tracing::warn!(soft, hard, error = %e, "the open-file limit could not be raised to the hard limit");
            Some(soft)
        }
    }
}

/// `http.max_connections` as the node applies it: the configured value, lowered (with a
/// warning that names both) when the open-file limit in force cannot hold it besides
/// [`RESERVED_DESCRIPTORS`].
pub fn connection_limit(configured: usize) -> usize {
    let Some((open_files, _)) = limits::open_files() else {
        return configured;
    };
    let effective = fit_connections(configured, open_files);
    if effective < configured {
        tracing::warn!(
            configured,
            effective,
            open_files,
            reserved = RESERVED_DESCRIPTORS,
            "http.max_connections lowered from {configured} to {effective}: the open-file limit is {open_files} descriptors and {RESERVED_DESCRIPTORS} are kept for data files, the write-ahead log, peers and upstream processes; raise the hard limit (ulimit -Hn, LimitNOFILE) to allow more"
        );
    }
    effective
}

/// The connections `open_files` descriptors allow for `configured`: all of them when the
/// limit less [`RESERVED_DESCRIPTORS`] holds them, else that many (a quarter of the limit when
/// the reserve would leave less), and at least one.
pub fn fit_connections(configured: usize, open_files: u64) -> usize {
    let room = open_files
        .saturating_sub(RESERVED_DESCRIPTORS)
        .max(open_files / 4)
        .max(1);
    configured.min(usize::try_from(room).unwrap_or(usize::MAX))
}

// `rlim_t` is `u64` on most targets and narrower on some 32-bit ones: the conversions stay.
#[cfg(unix)]
#[allow(clippy::useless_conversion)]
mod limits {
    /// The open-file limit (soft, hard), `RLIM_INFINITY` read as `u64::MAX`.
    pub(super) fn open_files() -> Option<(u64, u64)> {
        let mut l = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes only the struct it is given.
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) } != 0 {
            return None;
        }
        Some((value(l.rlim_cur), value(l.rlim_max)))
    }

    /// Set the soft open-file limit to `soft`, keeping the hard one.
    pub(super) fn set_soft(soft: u64) -> std::io::Result<()> {
        let mut l = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit and setrlimit read and write only the struct they are given.
        unsafe {
            if libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            l.rlim_cur = libc::rlim_t::try_from(soft).unwrap_or(libc::RLIM_INFINITY);
            if libc::setrlimit(libc::RLIMIT_NOFILE, &l) != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(())
    }

    fn value(v: libc::rlim_t) -> u64 {
        if v == libc::RLIM_INFINITY {
            u64::MAX
        } else {
            u64::try_from(v).unwrap_or(u64::MAX)
        }
    }
}

#[cfg(not(unix))]
mod limits {
    pub(super) fn open_files() -> Option<(u64, u64)> {
        None
    }

    pub(super) fn set_soft(_: u64) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_connections_keeps_the_reserve_below_the_open_file_limit() {
        // Room enough: the configured value.
        assert_eq!(fit_connections(10_000, 1_048_576), 10_000);
        assert_eq!(fit_connections(10_000, 10_256), 10_000);
        assert_eq!(fit_connections(10_000, u64::MAX), 10_000);
        // Not enough: the limit less the reserve.
        assert_eq!(fit_connections(10_000, 10_255), 9_999);
        assert_eq!(fit_connections(10_000, 1024), 768);
        assert_eq!(fit_connections(500, 1024), 500);
        // A limit the reserve would nearly swallow: a quarter of it, never none.
        assert_eq!(fit_connections(10_000, 300), 75);
        assert_eq!(fit_connections(10_000, 2), 1);
        assert_eq!(fit_connections(10_000, 0), 1);
        assert_eq!(fit_connections(1, 0), 1);
    }

    #[cfg(unix)]
    #[test]
    fn the_limit_in_force_is_read() {
        let (soft, hard) = limits::open_files().expect("an open-file limit");
        assert!(soft <= hard);
        assert!(connection_limit(usize::MAX) <= usize::try_from(soft).unwrap_or(usize::MAX));
    }
}
