//! Sizes and durations as people write them in policies: `"4GiB"`, `"10m"`.

use std::time::Duration;

/// Parse a byte size: a plain integer, or a number with `B`, `KiB`, `MiB`, `GiB`, `TiB`
/// (also `K`, `M`, `G`, `T`, `KB`…, all binary).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let number: u64 = digits
        .parse()
        .map_err(|_| format!("`{text}` is not a size; write e.g. `4096`, `512MiB` or `4GiB`"))?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        other => {
            return Err(format!(
                "unknown size unit `{other}` in `{text}`; use B, KiB, MiB, GiB or TiB"
            ))
        }
    };
    number
        .checked_mul(1u64 << shift)
        .ok_or_else(|| format!("size `{text}` is too large"))
}

/// Parse a duration: a plain integer (seconds) or a number with `ms`, `s`, `m`, `h`, `d`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let number: u64 = digits
        .parse()
        .map_err(|_| format!("`{text}` is not a duration; write e.g. `30s`, `10m` or `2h`"))?;
    let millis_per = match unit.trim() {
        "ms" => 1,
        "" | "s" => 1_000,
        "m" | "min" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        other => {
            return Err(format!(
                "unknown duration unit `{other}` in `{text}`; use ms, s, m, h or d"
            ))
        }
    };
    number
        .checked_mul(millis_per)
        .map(Duration::from_millis)
        .ok_or_else(|| format!("duration `{text}` is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("4GiB"), Ok(4 << 30));
        assert_eq!(parse_size("512MiB"), Ok(512 << 20));
        assert!(parse_size("-1").is_err());
        assert!(parse_size("4 parsecs").is_err());
        assert!(parse_size("").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("5"), Ok(Duration::from_secs(5)));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("1y").is_err());
    }
}
