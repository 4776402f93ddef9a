//! Pure parsers for the human-friendly quantities a policy contains: sizes
//! (`fsize = "10GiB"`) and durations (`timeout = "30m"`).
//!
//! They live outside `enforce` because the policy layer needs them to validate a
//! file without touching the kernel. Error messages are written to be shown to
//! the user as-is (after `cordon:` and the key's location).

use std::time::Duration;

/// Durations in JSON output (`explain --json`, `profiles show --resolved`) are whole
/// milliseconds under keys ending in `_ms`: stable and easy to read from any language.
pub fn serialize_millis<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(d.as_millis() as u64)
}

/// [`serialize_millis`] for an optional duration (`null` when unset).
pub fn serialize_millis_opt<S: serde::Serializer>(
    d: &Option<Duration>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => serialize_millis(d, s),
        None => s.serialize_none(),
    }
}

/// Parse a byte size: a non-negative integer, optionally followed by one unit.
///
/// Exists so that `[process] limits` and similar keys can be written as
/// `"8GiB"` instead of a raw byte count.
///
/// Accepted units (case-insensitive, optional whitespace before the unit):
/// `B`, `KiB`, `MiB`, `GiB`, `TiB` (powers of 1024). A plain integer is bytes.
/// Ambiguous units (`k`, `K`, `KB`, `M`, `MB`, `G`, `GB`, ...) are rejected with a
/// message naming the binary unit to use instead, because `KB` means 1000 to
/// some tools and 1024 to others and a resource limit must not be off by 2.4%.
/// Fractions and negative numbers are rejected; values that overflow `u64` too.
pub fn parse_size(input: &str) -> Result<u64, String> {
    let s = input.trim();
    if s.is_empty() {
        return Err("empty size; expected e.g. \"512MiB\", \"4GiB\" or a byte count".into());
    }
    if s.starts_with('-') {
        return Err(format!(
            "size {input:?} is negative; sizes must be 0 or more"
        ));
    }
    let digits_end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, rest) = s.split_at(digits_end);
    if num.is_empty() {
        return Err(format!(
            "size {input:?} does not start with a number; expected e.g. \"512MiB\" or \"4GiB\""
        ));
    }
    let unit = rest.trim_start();
    if unit.starts_with('.') || unit.starts_with(',') {
        return Err(format!(
            "size {input:?} has a fraction; use a whole number of a smaller unit (e.g. \"1536MiB\")"
        ));
    }
    let value: u64 = num
        .parse()
        .map_err(|_| format!("size {input:?} is too large"))?;
    let multiplier: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        "tib" => 1 << 40,
        "k" | "kb" => return Err(ambiguous(input, unit, "KiB")),
        "m" | "mb" => return Err(ambiguous(input, unit, "MiB")),
        "g" | "gb" => return Err(ambiguous(input, unit, "GiB")),
        "t" | "tb" => return Err(ambiguous(input, unit, "TiB")),
        _ => {
            return Err(format!(
                "size {input:?} has an unknown unit {unit:?}; use B, KiB, MiB, GiB or TiB"
            ))
        }
    };
    value
        .checked_mul(multiplier)
        .ok_or_else(|| format!("size {input:?} is too large (more than 2^64 bytes)"))
}

fn ambiguous(input: &str, unit: &str, binary: &str) -> String {
    format!("size {input:?}: unit {unit:?} is ambiguous (1000 or 1024?); write {binary} instead")
}

/// Parse a duration: `500ms`, `30s`, `10m`, `2h`, `1d`, compounds such as `1h30m`,
/// or a plain non-negative integer meaning seconds.
///
/// Exists for `--timeout`, `[process] timeout` and the `cpu` resource limit.
/// Zero is accepted (the caller decides whether it makes sense); negative
/// numbers, fractions, unknown units and overflow are rejected.
pub fn parse_duration(input: &str) -> Result<Duration, String> {
    let s = input.trim();
    if s.is_empty() {
        return Err("empty duration; expected e.g. \"30s\", \"10m\" or \"2h\"".into());
    }
    if s.starts_with('-') {
        return Err(format!("duration {input:?} is negative"));
    }
    if s.bytes().all(|b| b.is_ascii_digit()) {
        let secs: u64 = s
            .parse()
            .map_err(|_| format!("duration {input:?} is too large"))?;
        return Ok(Duration::from_secs(secs));
    }
    let too_large = || format!("duration {input:?} is too large");
    let mut total = Duration::ZERO;
    let mut rest = s;
    while !rest.is_empty() {
        let digits_end = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits_end == 0 {
            return Err(format!(
                "duration {input:?}: expected a number before {rest:?}; e.g. \"30s\", \"1h30m\""
            ));
        }
        let value: u64 = rest[..digits_end].parse().map_err(|_| too_large())?;
        rest = &rest[digits_end..];
        let unit_end = rest
            .find(|c: char| !c.is_ascii_alphabetic())
            .unwrap_or(rest.len());
        let unit = &rest[..unit_end];
        rest = &rest[unit_end..];
        let part = match unit {
            "ms" => Duration::from_millis(value),
            "s" => Duration::from_secs(value),
            "m" => Duration::from_secs(value.checked_mul(60).ok_or_else(too_large)?),
            "h" => Duration::from_secs(value.checked_mul(3600).ok_or_else(too_large)?),
            "d" => Duration::from_secs(value.checked_mul(86_400).ok_or_else(too_large)?),
            "" if rest.starts_with('.') => {
                return Err(format!(
                    "duration {input:?} has a fraction; use a smaller unit (e.g. \"1500ms\")"
                ))
            }
            "" => {
                return Err(format!(
                    "duration {input:?}: a unit is missing after {value}; use ms, s, m, h or d"
                ))
            }
            other => {
                return Err(format!(
                    "duration {input:?} has an unknown unit {other:?}; use ms, s, m, h or d"
                ))
            }
        };
        total = total.checked_add(part).ok_or_else(too_large)?;
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("12B"), Ok(12));
        assert_eq!(parse_size("10KiB"), Ok(10 * 1024));
        assert_eq!(parse_size("512MiB"), Ok(512 << 20));
        assert_eq!(parse_size("4GiB"), Ok(4 << 30));
        assert_eq!(parse_size("4 gib"), Ok(4 << 30));
        assert_eq!(parse_size(" 2TiB "), Ok(2 << 40));
    }

    #[test]
    fn size_errors() {
        for bad in [
            "", "  ", "-1", "-4GiB", "GiB", "abc", "1.5GiB", "4 GiB x", "10XB", "1e3",
        ] {
            let err = parse_size(bad).expect_err(bad);
            assert!(!err.is_empty());
        }
        assert!(parse_size("10k").unwrap_err().contains("KiB"));
        assert!(parse_size("10GB").unwrap_err().contains("GiB"));
        assert!(parse_size("-1").unwrap_err().contains("negative"));
        assert!(parse_size("1.5GiB").unwrap_err().contains("fraction"));
        assert!(parse_size("16777216TiB").unwrap_err().contains("too large"));
        assert!(parse_size("99999999999999999999")
            .unwrap_err()
            .contains("too large"));
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("1d"), Ok(Duration::from_secs(86_400)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(
            parse_duration(" 1m500ms "),
            Ok(Duration::from_millis(60_500))
        );
    }

    #[test]
    fn duration_errors() {
        for bad in [
            "", "-5", "-5s", "s", "1.5s", "10x", "10 s", "1h30", "ms10", "5sec",
        ] {
            let err = parse_duration(bad).expect_err(bad);
            assert!(!err.is_empty());
        }
        assert!(parse_duration("10x").unwrap_err().contains("unknown unit"));
        assert!(parse_duration("1.5s").unwrap_err().contains("fraction"));
        assert!(parse_duration("1h30")
            .unwrap_err()
            .contains("unit is missing"));
        assert!(parse_duration("99999999999999999999")
            .unwrap_err()
            .contains("too large"));
        assert!(parse_duration("18446744073709551615h")
            .unwrap_err()
            .contains("too large"));
    }
}
