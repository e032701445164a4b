//! The SVG charts, drawn with plotters' SVG backend: grouped bars on a log axis with min–max
//! whiskers, lines over a log-log plane, and labelled horizontal bars.

use std::ops::Range;

use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::numbers::fmt_rate;

/// One value with its spread.
#[derive(Clone, Copy, Debug)]
pub struct Bar {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

const PALETTE: [RGBColor; 10] = [
    RGBColor(0x1b, 0x6a, 0xc9),
    RGBColor(0xe8, 0x71, 0x0a),
    RGBColor(0x12, 0xa1, 0x50),
    RGBColor(0xc5, 0x22, 0x1f),
    RGBColor(0x8e, 0x44, 0xad),
    RGBColor(0x7f, 0x8c, 0x8d),
    RGBColor(0xb8, 0x86, 0x0b),
    RGBColor(0x00, 0x83, 0x8f),
    RGBColor(0x6f, 0xa8, 0xec),
    RGBColor(0x0b, 0x3d, 0x7a),
];

/// A fixed color per competitor, so every chart agrees.
fn color_of(name: &str) -> RGBColor {
    let i = match name {
        n if n.starts_with("funnel-batch") => 8,
        "funnel-direct" => 9,
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

/// Whole decades covering `[lo, hi]`, so a log axis starts and ends on a power of ten.
fn decades(lo: f64, hi: f64) -> Range<f64> {
    let lo = lo.max(1.0).log10().floor();
    let hi = hi.max(10.0).log10().ceil().max(lo + 1.0);
    10f64.powf(lo)..10f64.powf(hi)
}

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;
type Chart<'a, 'b, X, Y> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<X, Y>>;
type LogAxis = LogCoord<f64>;

/// Plotters' errors carry the backend's error type; the charts report them as text.
fn err<E: std::fmt::Debug>(e: E) -> String {
    format!("drawing a chart: {e:?}")
}

fn render(
    w: u32,
    h: u32,
    draw: impl FnOnce(&Area<'_>) -> Result<(), String>,
) -> Result<String, String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (w, h)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        draw(&root)?;
        root.present().map_err(err)?;
    }
    Ok(svg)
}

fn legend<'a, X, Y>(chart: &mut Chart<'a, 'a, X, Y>) -> Result<(), String>
where
    X: Ranged,
    Y: Ranged,
{
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.3))
        .draw()
        .map_err(err)
}

/// Grouped vertical bars on a log axis. `groups`: x labels; `series`: (name, one optional bar
/// per group).
pub fn grouped_bars(
    title: &str,
    y_label: &str,
    groups: &[String],
    series: &[(String, Vec<Option<Bar>>)],
) -> Result<String, String> {
    let bars = || series.iter().flat_map(|(_, b)| b.iter().flatten());
    let lo = bars().map(|b| b.min).fold(f64::INFINITY, f64::min);
    let hi = bars().map(|b| b.max).fold(0.0, f64::max);
    let y = decades(lo, hi * 3.0);
    let floor = y.start;
    let n = groups.len().max(1) as f64;
    render(160 + 130 * groups.len() as u32, 480, |root| {
        let mut chart = ChartBuilder::on(root)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .margin_right(40)
            .x_label_area_size(30)
            .y_label_area_size(70)
            .build_cartesian_2d(0.0..n, y.log_scale())
            .map_err(err)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .disable_x_axis()
            .y_desc(y_label)
            .y_label_formatter(&|v| fmt_rate(*v))
            .draw()
            .map_err(err)?;
        let width = 0.8 / series.len().max(1) as f64;
        for (s, (name, bars)) in series.iter().enumerate() {
            let color = color_of(name);
            let x0 = |g: usize| g as f64 + 0.1 + s as f64 * width;
            chart
                .draw_series(bars.iter().enumerate().filter_map(|(g, b)| {
                    b.map(|b| {
                        Rectangle::new(
                            [(x0(g), floor), (x0(g) + width * 0.9, b.median.max(floor))],
                            color.filled(),
                        )
                    })
                }))
                .map_err(err)?
                .label(name.as_str())
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled())
                });
            chart
                .draw_series(bars.iter().enumerate().filter_map(|(g, b)| {
                    b.map(|b| {
                        let cx = x0(g) + width * 0.45;
                        PathElement::new(
                            vec![(cx, b.min.max(floor)), (cx, b.max.max(floor))],
                            BLACK.stroke_width(1),
                        )
                    })
                }))
                .map_err(err)?;
        }
        group_labels(root, &chart, groups, floor)?;
        legend(&mut chart)
    })
}

/// Writes each group's name under its bars (the x axis is a plain 0..n range).
fn group_labels(
    root: &Area<'_>,
    chart: &Chart<'_, '_, RangedCoordf64, LogAxis>,
    groups: &[String],
    floor: f64,
) -> Result<(), String> {
    let style = ("sans-serif", 13)
        .into_font()
        .into_text_style(root)
        .pos(Pos::new(HPos::Center, VPos::Top));
    for (g, name) in groups.iter().enumerate() {
        let (px, py) = chart.backend_coord(&(g as f64 + 0.5, floor));
        root.draw(&Text::new(name.as_str(), (px, py + 8), style.clone()))
            .map_err(err)?;
    }
    Ok(())
}

/// Lines over a log-log plane: (series name, points (x, value)).
pub fn lines(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[(String, Vec<(f64, Bar)>)],
) -> Result<String, String> {
    let pts = || series.iter().flat_map(|(_, p)| p.iter());
    let x = decades(
        pts().map(|p| p.0).fold(f64::INFINITY, f64::min),
        pts().map(|p| p.0).fold(0.0, f64::max),
    );
    let y = decades(
        pts().map(|p| p.1.min).fold(f64::INFINITY, f64::min),
        pts().map(|p| p.1.max).fold(0.0, f64::max) * 3.0,
    );
    render(820, 480, |root| {
        let mut chart = ChartBuilder::on(root)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .margin_right(40)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(x.log_scale(), y.log_scale())
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc(x_label)
            .y_desc(y_label)
            .x_label_formatter(&|v| fmt_rate(*v))
            .y_label_formatter(&|v| fmt_rate(*v))
            .draw()
            .map_err(err)?;
        for (name, points) in series.iter().filter(|(_, p)| !p.is_empty()) {
            let color = color_of(name);
            chart
                .draw_series(LineSeries::new(
                    points.iter().map(|(x, b)| (*x, b.median)),
                    color.stroke_width(2),
                ))
                .map_err(err)?
                .label(name.as_str())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 14, y)], color.stroke_width(2))
                });
            chart
                .draw_series(
                    points
                        .iter()
                        .map(|(x, b)| Circle::new((*x, b.median), 3, color.filled())),
                )
                .map_err(err)?;
        }
        legend(&mut chart)
    })
}

/// Labelled horizontal bars on a log axis, one per line, with their value written at the end.
pub fn horizontal_bars(
    title: &str,
    x_label: &str,
    bars: &[(String, Bar)],
) -> Result<String, String> {
    let lo = bars.iter().map(|b| b.1.min).fold(f64::INFINITY, f64::min);
    let hi = bars.iter().map(|b| b.1.max).fold(0.0, f64::max);
    let x = decades(lo, hi * 3.0);
    let floor = x.start;
    let n = bars.len().max(1) as f64;
    render(980, 90 + 26 * bars.len() as u32, |root| {
        let mut chart = ChartBuilder::on(root)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .margin_right(40)
            .x_label_area_size(40)
            .y_label_area_size(300)
            .build_cartesian_2d(x.log_scale(), 0.0..n)
            .map_err(err)?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .disable_y_axis()
            .x_desc(x_label)
            .x_label_formatter(&|v| fmt_rate(*v))
            .draw()
            .map_err(err)?;
        // The first bar on top.
        let row = |i: usize| n - i as f64 - 1.0;
        chart
            .draw_series(bars.iter().enumerate().map(|(i, (name, b))| {
                Rectangle::new(
                    [(floor, row(i) + 0.15), (b.median.max(floor), row(i) + 0.85)],
                    color_of(name).filled(),
                )
            }))
            .map_err(err)?;
        let label = ("sans-serif", 13).into_font().into_text_style(root);
        for (i, (name, b)) in bars.iter().enumerate() {
            let (px, py) = chart.backend_coord(&(floor, row(i) + 0.5));
            root.draw(&Text::new(
                name.as_str(),
                (px - 8, py),
                label.clone().pos(Pos::new(HPos::Right, VPos::Center)),
            ))
            .map_err(err)?;
            let (vx, vy) = chart.backend_coord(&(b.median.max(floor), row(i) + 0.5));
            root.draw(&Text::new(
                format!("{}/s", fmt_rate(b.median)),
                (vx + 6, vy),
                label.clone().pos(Pos::new(HPos::Left, VPos::Center)),
            ))
            .map_err(err)?;
        }
        Ok(())
    })
}
