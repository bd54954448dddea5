//! Byte sizes on the command line: `64M`, `4K`, `1G`, `4096`.

/// Parses a positive byte count with an optional binary suffix: `K`, `M`, `G` or `T` (powers
/// of 1024, case-insensitive), optionally followed by `B` or `iB` (`64MiB`, `4kb`). A decimal
/// fraction is taken when it names a whole number of bytes (`1.5G`, `0.5K`; not `1.5`). The
/// error text is shown by clap after "invalid value '...' for '--size <SIZE>': ".
pub fn parse_size(text: &str) -> Result<u64, String> {
    let trimmed = text.trim();
    let number_end = trimmed
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(trimmed.len());
    let (number, suffix) = trimmed.split_at(number_end);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() || fraction.contains('.') {
        return Err("expected a number of bytes, optionally with a K, M, G or T suffix".into());
    }
    let multiplier = multiplier_of(suffix)?;
    let too_large = || format!("{text} is more bytes than fit in 64 bits");
    let digits: u128 = format!("{whole}{fraction}")
        .parse()
        .map_err(|_| too_large())?;
    let scale = 10u128
        .checked_pow(fraction.len() as u32)
        .ok_or_else(too_large)?;
    let scaled = digits
        .checked_mul(u128::from(multiplier))
        .ok_or_else(too_large)?;
    if scaled % scale != 0 {
        return Err(format!("{text} is not a whole number of bytes"));
    }
    let bytes = u64::try_from(scaled / scale).map_err(|_| too_large())?;
    if bytes == 0 {
        return Err("size must be greater than zero".into());
    }
    Ok(bytes)
}

/// The factor of a size suffix (empty for plain bytes).
fn multiplier_of(suffix: &str) -> Result<u64, String> {
    let lower = suffix.to_ascii_lowercase();
    // Accept "k", "kb" and "kib" alike; a bare "b" means bytes.
    let unit = lower
        .strip_suffix("ib")
        .or_else(|| lower.strip_suffix('b'))
        .unwrap_or(&lower);
    let shift = match unit {
        "" if !lower.starts_with('i') => 0,
        "k" => 10,
        "m" => 20,
        "g" => 30,
        "t" => 40,
        _ => {
            return Err(format!("unknown size suffix {suffix:?} (use K, M, G or T)"));
        }
    };
    Ok(1u64 << shift)
}

/// Formats a byte count for people: an exact binary unit when there is one (`64 MiB`),
/// otherwise two decimals (`1.50 KiB`), plain bytes below 1 KiB.
pub fn format_bytes(bytes: u64) -> String {
    const UNITS: [(&str, u32); 4] = [("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)];
    for (name, shift) in UNITS {
        let unit = 1u64 << shift;
        if bytes >= unit {
            return if bytes.is_multiple_of(unit) {
                format!("{} {name}", bytes >> shift)
            } else {
                format!("{:.2} {name}", bytes as f64 / unit as f64)
            };
        }
    }
    format!("{bytes} B")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_plain_and_suffixed_sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("4K"), Ok(4096));
        assert_eq!(parse_size("4k"), Ok(4096));
        assert_eq!(parse_size("64M"), Ok(64 << 20));
        assert_eq!(parse_size("64MiB"), Ok(64 << 20));
        assert_eq!(parse_size("64mb"), Ok(64 << 20));
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        assert_eq!(parse_size("1T"), Ok(1 << 40));
        assert_eq!(parse_size("512B"), Ok(512));
        assert_eq!(parse_size(" 8K "), Ok(8192));
        assert_eq!(parse_size("1.5G"), Ok(3 << 29));
        assert_eq!(parse_size("0.5K"), Ok(512));
        assert_eq!(parse_size("2.25M"), Ok(9 << 18));
        assert_eq!(parse_size(".5K"), Ok(512));
        assert_eq!(parse_size("64.0MB"), Ok(64 << 20));
    }

    #[test]
    fn rejects_bad_sizes_with_a_reason() {
        for (text, reason) in [
            ("12Q", "unknown size suffix"),
            ("0", "greater than zero"),
            ("0K", "greater than zero"),
            ("", "expected a number"),
            ("M", "expected a number"),
            ("-5M", "expected a number"),
            ("1.5", "whole number of bytes"),
            ("0.001K", "whole number of bytes"),
            (".", "expected a number"),
            ("1.2.3G", "expected a number"),
            ("12 M", "unknown size suffix"),
            ("4KK", "unknown size suffix"),
            ("4i", "unknown size suffix"),
            ("99999999999999999999", "64 bits"),
            ("0.00000000000000000000000000000000000000001K", "64 bits"),
            ("17179869184G", "64 bits"),
        ] {
            let error = parse_size(text).expect_err(text);
            assert!(error.contains(reason), "{text:?}: {error}");
        }
    }

    #[test]
    fn formats_sizes_for_people() {
        assert_eq!(format_bytes(0), "0 B");
        assert_eq!(format_bytes(1023), "1023 B");
        assert_eq!(format_bytes(4096), "4 KiB");
        assert_eq!(format_bytes(1536), "1.50 KiB");
        assert_eq!(format_bytes(64 << 20), "64 MiB");
        assert_eq!(format_bytes((64 << 20) - 8192), "63.99 MiB");
        assert_eq!(format_bytes(3 << 40), "3 TiB");
    }
}
