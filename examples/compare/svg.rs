//! Hand-written SVG charts: grouped bars (log scale, with min–max whiskers), lines over a log-log
//! plane, and labelled horizontal bars. Plain SVG 1.1, no scripts, no external fonts.

use std::fmt::Write as _;

use crate::report::fmt_rate;

pub const PALETTE: [&str; 8] = [
    "#1b6ac9", "#e8710a", "#12a150", "#c5221f", "#8e44ad", "#7f8c8d", "#b8860b", "#00838f",
];

/// One value with its spread.
#[derive(Clone, Copy, Debug)]
pub struct Bar {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

/// A fixed color per competitor, so every chart agrees.
pub fn color_of(name: &str) -> &'static str {
    let i = match name {
        n if n.starts_with("funnel") => 0,
        "governor-direct" => 1,
        n if n.starts_with("governor-keyed-ahash") => 3,
        n if n.starts_with("governor-keyed") => 2,
        n if n.starts_with("mutex-map") => 4,
        n if n.contains("pipeline") => 7,
        n if n.contains("conns") => 6,
        _ => 5,
    };
    PALETTE[i]
}

/// `1`, `10`, `100`, `1k` ... `1G`: a decade's label.
fn decade_label(v: f64) -> String {
    let (d, unit) = match v {
        v if v >= 1e9 => (v / 1e9, "G"),
        v if v >= 1e6 => (v / 1e6, "M"),
        v if v >= 1e3 => (v / 1e3, "k"),
        v => (v, ""),
    };
    format!("{}{unit}", d.round())
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Decades covering `[lo, hi]`.
fn decades(lo: f64, hi: f64) -> (f64, f64) {
    let lo = lo.max(1.0).log10().floor();
    let hi = hi.max(10.0).log10().ceil();
    (lo, if hi > lo { hi } else { lo + 1.0 })
}

fn header(svg: &mut String, w: u32, h: u32, title: &str) {
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="Helvetica, Arial, sans-serif" font-size="12">"#
    );
    let _ = writeln!(svg, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="22" text-anchor="middle" font-size="15" font-weight="bold">{}</text>"#,
        w / 2,
        esc(title)
    );
}

/// Grouped vertical bars on a log axis. `groups`: x labels; `series`: (name, one optional bar
/// per group).
pub fn grouped_bars(
    title: &str,
    y_label: &str,
    groups: &[String],
    series: &[(String, Vec<Option<Bar>>)],
) -> String {
    let (w, h) = (960u32, 460u32);
    let (left, right, top, bottom) = (80.0, 20.0, 40.0, 110.0);
    let pw = f64::from(w) - left - right;
    let ph = f64::from(h) - top - bottom;
    let values = series.iter().flat_map(|(_, v)| v.iter().flatten());
    let lo = values
        .clone()
        .map(|b| b.min.min(b.median))
        .fold(f64::INFINITY, f64::min);
    let hi = values.map(|b| b.max.max(b.median)).fold(0.0, f64::max);
    let (d0, d1) = decades(if lo.is_finite() { lo } else { 1.0 }, hi);
    let y = |v: f64| top + ph * (1.0 - (v.max(1.0).log10() - d0) / (d1 - d0));
    let mut svg = String::new();
    header(&mut svg, w, h, title);
    axis_y(&mut svg, left, top, pw, ph, d0, d1, y_label, &y);
    let gw = pw / groups.len().max(1) as f64;
    let n = series.len().max(1) as f64;
    let bw = (gw * 0.8 / n).min(40.0);
    for (g, label) in groups.iter().enumerate() {
        let gx = left + gw * g as f64;
        let _ = writeln!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            gx + gw / 2.0,
            top + ph + 16.0,
            esc(label)
        );
        let start = gx + (gw - bw * n) / 2.0;
        for (s, (name, bars)) in series.iter().enumerate() {
            let Some(Some(b)) = bars.get(g) else { continue };
            let x = start + bw * s as f64;
            let color = color_of(name);
            let yt = y(b.median);
            let _ = writeln!(
                svg,
                r#"<rect x="{x:.1}" y="{yt:.1}" width="{:.1}" height="{:.1}" fill="{color}"><title>{}: {}/s</title></rect>"#,
                bw - 2.0,
                (top + ph - yt).max(0.0),
                esc(name),
                fmt_rate(b.median)
            );
            let cx = x + (bw - 2.0) / 2.0;
            if b.max > b.min {
                let _ = writeln!(
                    svg,
                    r#"<line x1="{cx:.1}" x2="{cx:.1}" y1="{:.1}" y2="{:.1}" stroke="black" stroke-width="1"/>"#,
                    y(b.min),
                    y(b.max)
                );
            }
        }
    }
    legend(
        &mut svg,
        left,
        f64::from(h) - 60.0,
        pw,
        series.iter().map(|(n, _)| n.as_str()),
    );
    svg.push_str("</svg>\n");
    svg
}

/// Lines over a log-log plane: `series`: (name, points (x, bar)).
pub fn lines(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[(String, Vec<(f64, Bar)>)],
) -> String {
    let (w, h) = (960u32, 460u32);
    let (left, right, top, bottom) = (80.0, 20.0, 40.0, 110.0);
    let pw = f64::from(w) - left - right;
    let ph = f64::from(h) - top - bottom;
    let pts = series.iter().flat_map(|(_, p)| p.iter());
    let lo = pts
        .clone()
        .map(|(_, b)| b.min.min(b.median))
        .fold(f64::INFINITY, f64::min);
    let hi = pts
        .clone()
        .map(|(_, b)| b.max.max(b.median))
        .fold(0.0, f64::max);
    let x_hi = pts.clone().map(|(x, _)| *x).fold(1.0, f64::max);
    let (d0, d1) = decades(if lo.is_finite() { lo } else { 1.0 }, hi);
    let (x0, x1) = (0.0, x_hi.max(10.0).log10().ceil());
    let y = |v: f64| top + ph * (1.0 - (v.max(1.0).log10() - d0) / (d1 - d0));
    let x = |v: f64| left + pw * (v.max(1.0).log10() - x0) / (x1 - x0);
    let mut svg = String::new();
    header(&mut svg, w, h, title);
    axis_y(&mut svg, left, top, pw, ph, d0, d1, y_label, &y);
    let mut d = x0 as i32;
    while d <= x1 as i32 {
        let xv = 10f64.powi(d);
        let _ = writeln!(
            svg,
            r##"<line x1="{0:.1}" x2="{0:.1}" y1="{1:.1}" y2="{2:.1}" stroke="#e0e0e0"/><text x="{0:.1}" y="{3:.1}" text-anchor="middle">{4}</text>"##,
            x(xv),
            top,
            top + ph,
            top + ph + 16.0,
            decade_label(xv)
        );
        d += 1;
    }
    let _ = writeln!(
        svg,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
        left + pw / 2.0,
        top + ph + 34.0,
        esc(x_label)
    );
    for (name, points) in series {
        let color = color_of(name);
        let path: Vec<String> = points
            .iter()
            .map(|(px, b)| format!("{:.1},{:.1}", x(*px), y(b.median)))
            .collect();
        if path.len() > 1 {
            let _ = writeln!(
                svg,
                r#"<polyline points="{}" fill="none" stroke="{color}" stroke-width="2"/>"#,
                path.join(" ")
            );
        }
        for (px, b) in points {
            let _ = writeln!(
                svg,
                r#"<circle cx="{:.1}" cy="{:.1}" r="4" fill="{color}"><title>{}: {}/s at {} keys</title></circle>"#,
                x(*px),
                y(b.median),
                esc(name),
                fmt_rate(b.median),
                px
            );
        }
    }
    legend(
        &mut svg,
        left,
        f64::from(h) - 60.0,
        pw,
        series.iter().map(|(n, _)| n.as_str()),
    );
    svg.push_str("</svg>\n");
    svg
}

/// Horizontal bars on a log axis, one per labelled value, colored by competitor name.
pub fn horizontal_bars(title: &str, x_label: &str, bars: &[(String, Bar)]) -> String {
    let row = 22.0;
    let (left, right, top) = (300.0, 90.0, 40.0);
    let w = 960u32;
    let ph = row * bars.len() as f64;
    let h = (top + ph + 60.0) as u32;
    let pw = f64::from(w) - left - right;
    let lo = bars
        .iter()
        .map(|(_, b)| b.min.min(b.median))
        .fold(f64::INFINITY, f64::min);
    let hi = bars
        .iter()
        .map(|(_, b)| b.max.max(b.median))
        .fold(0.0, f64::max);
    let (d0, d1) = decades(if lo.is_finite() { lo } else { 1.0 }, hi);
    let x = |v: f64| left + pw * (v.max(1.0).log10() - d0) / (d1 - d0);
    let mut svg = String::new();
    header(&mut svg, w, h, title);
    let mut d = d0 as i32;
    while d <= d1 as i32 {
        let xv = 10f64.powi(d);
        let _ = writeln!(
            svg,
            r##"<line x1="{0:.1}" x2="{0:.1}" y1="{1:.1}" y2="{2:.1}" stroke="#e0e0e0"/><text x="{0:.1}" y="{3:.1}" text-anchor="middle">{4}/s</text>"##,
            x(xv),
            top,
            top + ph,
            top + ph + 16.0,
            decade_label(xv)
        );
        d += 1;
    }
    let _ = writeln!(
        svg,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
        left + pw / 2.0,
        top + ph + 36.0,
        esc(x_label)
    );
    for (i, (label, b)) in bars.iter().enumerate() {
        let yy = top + row * i as f64;
        let color = color_of(label);
        let _ = writeln!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
            left - 6.0,
            yy + row * 0.7,
            esc(label)
        );
        let x0 = x(10f64.powf(d0));
        let _ = writeln!(
            svg,
            r#"<rect x="{x0:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{color}"/>"#,
            yy + 3.0,
            (x(b.median) - x0).max(1.0),
            row - 6.0
        );
        if b.max > b.min {
            let _ = writeln!(
                svg,
                r#"<line x1="{0:.1}" x2="{1:.1}" y1="{2:.1}" y2="{2:.1}" stroke="black"/>"#,
                x(b.min),
                x(b.max),
                yy + row / 2.0
            );
        }
        let _ = writeln!(
            svg,
            r#"<text x="{:.1}" y="{:.1}">{}/s</text>"#,
            x(b.median.max(b.max)) + 4.0,
            yy + row * 0.7,
            esc(&fmt_rate(b.median))
        );
    }
    svg.push_str("</svg>\n");
    svg
}

#[allow(clippy::too_many_arguments)]
fn axis_y(
    svg: &mut String,
    left: f64,
    top: f64,
    pw: f64,
    ph: f64,
    d0: f64,
    d1: f64,
    label: &str,
    y: &dyn Fn(f64) -> f64,
) {
    let mut d = d0 as i32;
    while d <= d1 as i32 {
        let v = 10f64.powi(d);
        let _ = writeln!(
            svg,
            r##"<line x1="{left:.1}" x2="{0:.1}" y1="{1:.1}" y2="{1:.1}" stroke="#e0e0e0"/><text x="{2:.1}" y="{3:.1}" text-anchor="end">{4}/s</text>"##,
            left + pw,
            y(v),
            left - 6.0,
            y(v) + 4.0,
            decade_label(v)
        );
        d += 1;
    }
    let _ = writeln!(
        svg,
        r#"<line x1="{left:.1}" x2="{left:.1}" y1="{top:.1}" y2="{0:.1}" stroke="black"/><line x1="{left:.1}" x2="{1:.1}" y1="{2:.1}" y2="{2:.1}" stroke="black"/>"#,
        top + ph,
        left + pw,
        top + ph
    );
    let _ = writeln!(
        svg,
        r#"<text transform="translate(18 {:.1}) rotate(-90)" text-anchor="middle">{}</text>"#,
        top + ph / 2.0,
        esc(label)
    );
}

fn legend<'a>(
    svg: &mut String,
    left: f64,
    y: f64,
    width: f64,
    names: impl Iterator<Item = &'a str>,
) {
    let names: Vec<&str> = names.collect();
    let per_row = 4usize;
    let cw = width / per_row as f64;
    for (i, name) in names.iter().enumerate() {
        let x = left + cw * (i % per_row) as f64;
        let yy = y + 18.0 * (i / per_row) as f64;
        let color = color_of(name);
        let _ = writeln!(
            svg,
            r#"<rect x="{x:.1}" y="{:.1}" width="12" height="12" fill="{color}"/><text x="{:.1}" y="{:.1}">{}</text>"#,
            yy - 10.0,
            x + 16.0,
            yy,
            esc(name)
        );
    }
}
