//! RFC 3339 timestamps (UTC, millisecond precision, `Z` suffix) from milliseconds since the
//! Unix epoch. `createdAt` and `lastUpdatedAt` are derived from the stored integers, so the
//! same record always renders the same bytes. And the wall clock every layer stamps with:
//! [`now_ms`] (task times) and [`now_us`] (the start of a message's delivery delay).

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch, by the wall clock (0 before 1970).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Microseconds since the Unix epoch, by the wall clock (0 before 1970).
pub fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// Format `ms` since the epoch as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub fn rfc3339_ms(ms: u64) -> String {
    Rfc3339Ms(ms).to_string()
}

/// An instant, `ms` since the epoch, that displays and serialises as
/// `YYYY-MM-DDTHH:MM:SS.mmmZ` straight into the output, with no string of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rfc3339Ms(pub u64);

impl std::fmt::Display for Rfc3339Ms {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let secs = self.0 / 1000;
        let millis = self.0 % 1000;
        let rem = secs % 86_400;
        let (y, m, d) = civil_from_days((secs / 86_400) as i64);
        write!(
            f,
            "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{millis:03}Z",
            rem / 3600,
            (rem % 3600) / 60,
            rem % 60
        )
    }
}

impl serde::Serialize for Rfc3339Ms {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Days since 1970-01-01 to a proleptic Gregorian (year, month, day).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_instants() {
        assert_eq!(rfc3339_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339_ms(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(rfc3339_ms(1_764_066_600_000), "2025-11-25T10:30:00.000Z");
        assert_eq!(rfc3339_ms(4_102_444_799_999), "2099-12-31T23:59:59.999Z");
    }

    #[test]
    fn serialises_as_its_text() {
        let json = serde_json::to_string(&Rfc3339Ms(951_782_400_123)).unwrap();
        assert_eq!(json, "\"2000-02-29T00:00:00.123Z\"");
    }
}
