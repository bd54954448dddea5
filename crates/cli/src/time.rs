//! UTC timestamps in RFC 3339 form (whole seconds), formatted by `humantime`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Formats nanoseconds since the Unix epoch as `YYYY-MM-DDTHH:MM:SSZ` (UTC, whole seconds).
pub fn rfc3339_from_unix_ns(unix_ns: u64) -> String {
    let at = UNIX_EPOCH + Duration::from_nanos(unix_ns);
    humantime::format_rfc3339_seconds(at).to_string()
}

/// The current time, formatted by [`rfc3339_from_unix_ns`].
pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    const NS: u64 = 1_000_000_000;

    #[test]
    fn epoch_and_known_instants() {
        assert_eq!(rfc3339_from_unix_ns(0), "1970-01-01T00:00:00Z");
        assert_eq!(
            rfc3339_from_unix_ns(951_782_400 * NS),
            "2000-02-29T00:00:00Z"
        );
        assert_eq!(
            rfc3339_from_unix_ns(1_709_251_199 * NS + 999_999_999),
            "2024-02-29T23:59:59Z"
        );
        assert_eq!(
            rfc3339_from_unix_ns(4_107_542_400 * NS),
            "2100-03-01T00:00:00Z"
        );
        assert_eq!(
            rfc3339_from_unix_ns(1_234_567_890 * NS),
            "2009-02-13T23:31:30Z"
        );
    }

    #[test]
    fn the_current_time_is_one_whole_second_in_utc() {
        let now = now_rfc3339();
        assert_eq!(now.len(), "1970-01-01T00:00:00Z".len(), "{now}");
        assert!(now.ends_with('Z') && now.as_bytes()[10] == b'T', "{now}");
    }
}
