//! UTC timestamps in RFC 3339 form, without a date-time dependency.

use std::time::{SystemTime, UNIX_EPOCH};

/// Formats nanoseconds since the Unix epoch as `YYYY-MM-DDTHH:MM:SSZ` (UTC, whole seconds).
pub fn rfc3339_from_unix_ns(unix_ns: u64) -> String {
    let seconds = unix_ns / 1_000_000_000;
    let (days, second_of_day) = (seconds / 86_400, seconds % 86_400);
    let (year, month, day) = civil_date(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        second_of_day / 3600,
        second_of_day % 3600 / 60,
        second_of_day % 60
    )
}

/// The current time, formatted by [`rfc3339_from_unix_ns`].
pub fn now_rfc3339() -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_nanos());
    rfc3339_from_unix_ns(u64::try_from(now).unwrap_or(u64::MAX))
}

/// The proleptic Gregorian date `days` days after 1970-01-01.
///
/// Works in 400-year eras (146 097 days each, a whole number of weeks and leap cycles) and
/// in years that start on 1 March, so the leap day is the last day of its year and the month
/// lengths before it never depend on leapness.
fn civil_date(days: u64) -> (u64, u64, u64) {
    // 1970-01-01 is day 719 468 counted from 0000-03-01.
    let since_epoch_0 = days + 719_468;
    let era = since_epoch_0 / 146_097;
    let day_of_era = since_epoch_0 % 146_097;
    // Every 4 years add a leap day, except every 100, except every 400 (the era's last day).
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    // Months from March: lengths 31 30 31 30 31 31 30 31 30 31 31 28/29 follow (153 m + 2) / 5.
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = era * 400 + year_of_era + u64::from(month <= 2);
    (year, month, day)
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
    fn day_after_every_month_end_rolls_over() {
        // Walk day by day through 1999..2001 and check the calendar arithmetic stays sane.
        let start = 10_592; // 1999-01-01
        let mut previous = civil_date(start - 1);
        for days in start..start + 3 * 366 {
            let (year, month, day) = civil_date(days);
            let next_day = (year, month, day) == (previous.0, previous.1, previous.2 + 1);
            let next_month = day == 1 && (year, month) == (previous.0, previous.1 + 1);
            let next_year = (month, day) == (1, 1) && year == previous.0 + 1;
            assert!(
                next_day || next_month || next_year,
                "{previous:?} -> {year}-{month}-{day}"
            );
            previous = (year, month, day);
        }
    }
}
