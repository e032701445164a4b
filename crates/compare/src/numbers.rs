//! Numbers as the reports write them: rates, durations, ratios, counts.

/// `12.3 M`, `456 k`, `789`: decisions per second, three significant digits.
pub fn fmt_rate(r: f64) -> String {
    if !r.is_finite() || r <= 0.0 {
        return "–".to_string();
    }
    let (v, unit) = if r >= 1e9 {
        (r / 1e9, " G")
    } else if r >= 1e6 {
        (r / 1e6, " M")
    } else if r >= 1e3 {
        (r / 1e3, " k")
    } else {
        (r, "")
    };
    format!("{}{unit}", sig3(v))
}

/// `12.3 ns`, `4.56 µs`, `78.9 ms`.
pub fn fmt_ns(ns: f64) -> String {
    if !ns.is_finite() || ns <= 0.0 {
        return "–".to_string();
    }
    if ns >= 1e6 {
        format!("{} ms", sig3(ns / 1e6))
    } else if ns >= 1e3 {
        format!("{} µs", sig3(ns / 1e3))
    } else {
        format!("{} ns", sig3(ns))
    }
}

/// A ratio: `2.41×`, `1,234×`.
pub fn fmt_ratio(x: f64) -> String {
    if !x.is_finite() || x <= 0.0 {
        "–".to_string()
    } else if x >= 100.0 {
        format!("{}×", fmt_int(x.round() as u64))
    } else if x >= 10.0 {
        format!("{x:.1}×")
    } else {
        format!("{x:.2}×")
    }
}

pub fn sig3(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// `10,000,000`.
pub fn fmt_int(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `1`, `1k`, `1M`, `10M`, `100k`: a key-space size in a label.
pub fn fmt_count_short(n: u64) -> String {
    match n {
        n if n >= 1_000_000 && n % 1_000_000 == 0 => format!("{}M", n / 1_000_000),
        n if n >= 1_000 && n % 1_000 == 0 => format!("{}k", n / 1_000),
        n => n.to_string(),
    }
}
