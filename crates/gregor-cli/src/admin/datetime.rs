//! `--to-datetime` values: Kafka's `YYYY-MM-DDTHH:mm:SS.sss` with an optional zone.

use anyhow::{anyhow, bail, Result};

/// Milliseconds since the epoch for `2024-01-31T12:00:00.000`, `...Z`, `...+08:00`,
/// `...-0530`. Seconds and milliseconds may be left out. Without a zone the time is read as
/// UTC (Kafka's tool uses the JVM's local zone; give a zone to be explicit).
pub fn parse_datetime(text: &str) -> Result<i64> {
    let err = || {
        anyhow!(
            "invalid datetime '{text}': expected YYYY-MM-DDTHH:mm:SS.sss with an optional \
             zone (Z, +HH:MM, -HHMM)"
        )
    };
    let (date, time) = text.split_once('T').ok_or_else(|| {
        anyhow!("Error parsing timestamp '{text}'. It does not contain a 'T' according to ISO8601 format")
    })?;
    let (time, offset_minutes) = split_zone(time).ok_or_else(err)?;

    let d: Vec<&str> = date.split('-').collect();
    let [y, mo, da] = d.as_slice() else {
        return Err(err());
    };
    let year: i64 = number(y, 4, 4).ok_or_else(err)?;
    let month: i64 = number(mo, 2, 2).ok_or_else(err)?;
    let day: i64 = number(da, 2, 2).ok_or_else(err)?;

    let (hms, millis) = match time.split_once('.') {
        Some((hms, ms)) => (
            hms,
            number(ms, 1, 3).ok_or_else(err)? * 10i64.pow(3 - ms.len() as u32),
        ),
        None => (time, 0),
    };
    let t: Vec<&str> = hms.split(':').collect();
    let (hour, minute, second) = match t.as_slice() {
        [h, m] => (number(h, 2, 2), number(m, 2, 2), Some(0)),
        [h, m, s] => (number(h, 2, 2), number(m, 2, 2), number(s, 2, 2)),
        _ => return Err(err()),
    };
    let (hour, minute, second) = (
        hour.ok_or_else(err)?,
        minute.ok_or_else(err)?,
        second.ok_or_else(err)?,
    );
    if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        bail!("invalid datetime '{text}': no such date");
    }
    if hour > 23 || minute > 59 || second > 59 {
        bail!("invalid datetime '{text}': no such time of day");
    }
    let days = days_from_civil(year, month, day);
    let seconds = days * 86_400 + hour * 3600 + minute * 60 + second - offset_minutes * 60;
    Ok(seconds * 1000 + millis)
}

/// Splits `HH:mm:SS.sss[zone]` into the time and the zone's offset in minutes east of UTC.
fn split_zone(time: &str) -> Option<(&str, i64)> {
    if let Some(t) = time.strip_suffix('Z') {
        return Some((t, 0));
    }
    match time.find(['+', '-']) {
        None => Some((time, 0)),
        Some(i) => {
            let (t, zone) = time.split_at(i);
            let sign = if zone.starts_with('-') { -1 } else { 1 };
            let digits: String = zone[1..].chars().filter(|c| *c != ':').collect();
            let (h, m) = match digits.len() {
                2 => (number(&digits, 2, 2)?, 0),
                4 => (number(&digits[..2], 2, 2)?, number(&digits[2..], 2, 2)?),
                _ => return None,
            };
            if h > 18 || m > 59 {
                return None;
            }
            Some((t, sign * (h * 60 + m)))
        }
    }
}

fn number(s: &str, min_len: usize, max_len: usize) -> Option<i64> {
    if s.len() < min_len || s.len() > max_len || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

fn is_leap(year: i64) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Milliseconds in a `--by-duration` value: Java's `Duration.parse` form `PnDTnHnMn.nS`
/// (letters in either case, every part optional but at least one, seconds with up to 9
/// decimals), e.g. `PT30M`, `P1DT2H`, `PT0.5S`. A leading `-` gives a negative duration.
pub fn parse_duration(text: &str) -> Result<i64> {
    let err = || {
        anyhow!("invalid duration '{text}': expected PnDTnHnMnS (ISO-8601, e.g. PT30M or P1DT2H)")
    };
    let upper = text.trim().to_ascii_uppercase();
    let (negative, rest) = match upper.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, upper.strip_prefix('+').unwrap_or(&upper)),
    };
    let rest = rest.strip_prefix('P').ok_or_else(err)?;
    let (days, time) = match rest.split_once('T') {
        Some((d, t)) => {
            if t.is_empty() {
                return Err(err());
            }
            (d, t)
        }
        None => (rest, ""),
    };
    let mut total: i64 = 0;
    let mut parts = 0;
    if !days.is_empty() {
        let n = days.strip_suffix('D').ok_or_else(err)?;
        total = add(total, whole(n).ok_or_else(err)?, 86_400_000).ok_or_else(err)?;
        parts += 1;
    }
    let mut t = time;
    for (unit, ms) in [('H', 3_600_000i64), ('M', 60_000)] {
        if let Some(i) = t.find(unit) {
            total = add(total, whole(&t[..i]).ok_or_else(err)?, ms).ok_or_else(err)?;
            t = &t[i + 1..];
            parts += 1;
        }
    }
    if !t.is_empty() {
        let s = t.strip_suffix('S').ok_or_else(err)?;
        let (secs, frac) = match s.split_once(['.', ',']) {
            Some((a, b)) => (a, b),
            None => (s, ""),
        };
        if frac.len() > 9 || !frac.chars().all(|c| c.is_ascii_digit()) {
            return Err(err());
        }
        total = add(total, whole(secs).ok_or_else(err)?, 1000).ok_or_else(err)?;
        let millis = format!("{frac:0<3}")[..3]
            .parse::<i64>()
            .map_err(|_| err())?;
        total = total.checked_add(millis).ok_or_else(err)?;
        parts += 1;
    }
    if parts == 0 {
        return Err(err());
    }
    Ok(if negative { -total } else { total })
}

fn whole(text: &str) -> Option<i64> {
    if text.is_empty() || !text.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

fn add(total: i64, n: i64, unit_ms: i64) -> Option<i64> {
    total.checked_add(n.checked_mul(unit_ms)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_kafka_datetimes() {
        assert_eq!(parse_datetime("1970-01-01T00:00:00.000").unwrap(), 0);
        assert_eq!(parse_datetime("1970-01-01T00:00:00.001Z").unwrap(), 1);
        // 2026-10-29T12:00:00Z, the seed's experiment date.
        assert_eq!(
            parse_datetime("2026-10-29T12:00:00.000Z").unwrap(),
            1_793_275_200_000
        );
        assert_eq!(
            parse_datetime("2026-10-29T20:00:00.000+08:00").unwrap(),
            1_793_275_200_000
        );
        assert_eq!(
            parse_datetime("2026-10-29T06:30:00-0530").unwrap(),
            1_793_275_200_000
        );
        assert_eq!(
            parse_datetime("2026-10-29T12:00").unwrap(),
            1_793_275_200_000
        );
        assert_eq!(
            parse_datetime("2024-02-29T00:00:00.5").unwrap(),
            1_709_164_800_500
        );
    }

    #[test]
    fn rejects_malformed_datetimes() {
        for bad in [
            "2024-01-01",
            "2024-01-01 00:00:00",
            "2024-1-01T00:00:00",
            "2024-02-30T00:00:00",
            "2023-02-29T00:00:00",
            "2024-13-01T00:00:00",
            "2024-01-01T24:00:00",
            "2024-01-01T00:00:00.1234",
            "2024-01-01T00:00:00+1",
            "yesterday",
        ] {
            assert!(parse_datetime(bad).is_err(), "{bad}");
        }
        assert!(parse_datetime("2024-01-01")
            .unwrap_err()
            .to_string()
            .contains("'T'"));
    }

    #[test]
    fn parses_java_durations() {
        assert_eq!(parse_duration("PT30M").unwrap(), 1_800_000);
        assert_eq!(parse_duration("pt1h30m").unwrap(), 5_400_000);
        assert_eq!(parse_duration("P1DT2H").unwrap(), 93_600_000);
        assert_eq!(parse_duration("P2D").unwrap(), 172_800_000);
        assert_eq!(parse_duration("PT0.5S").unwrap(), 500);
        assert_eq!(parse_duration("PT1H2M3.004S").unwrap(), 3_723_004);
        assert_eq!(parse_duration("-PT1S").unwrap(), -1000);
        for bad in [
            "",
            "P",
            "PT",
            "30M",
            "PT30",
            "PT1S1H",
            "PT-1H",
            "P1H",
            "PT1.1234567891S",
            "1h",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
