//! SVG charts for the report, drawn with plotters' SVG backend.
//!
//! Built without plotters' font support: the SVG backend writes text as `<text>` elements
//! that the browser lays out, so no font files are needed (plotters only estimates text
//! widths for spacing).

use anyhow::Result;
use plotters::coord::combinators::WithKeyPoints;
use plotters::coord::ranged1d::{SegmentValue, SegmentedCoord};
use plotters::coord::types::{RangedCoordi64, RangedCoordusize};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// Pixel size of every chart.
const SIZE: (u32, u32) = (720, 420);
/// Series colours: Okabe and Ito's colour-blind-friendly palette, most distinct first, then
/// black, a dark red, a violet and an olive for charts with more series (the Silo
/// transaction-size sweep: seven workloads, their mean, the mean write growth and the
/// paper's two marks). A chart with more series than this repeats colours.
const PALETTE: [RGBColor; 11] = [
    RGBColor(0, 114, 178),
    RGBColor(230, 159, 0),
    RGBColor(0, 158, 115),
    RGBColor(213, 94, 0),
    RGBColor(204, 121, 167),
    RGBColor(86, 180, 233),
    RGBColor(90, 90, 90),
    RGBColor(0, 0, 0),
    RGBColor(150, 20, 40),
    RGBColor(110, 60, 190),
    RGBColor(140, 140, 20),
];
const FONT: &str = "sans-serif";

/// A named line of `(x, y)` points.
#[derive(Clone, Debug)]
pub struct Series {
    /// Legend entry.
    pub name: String,
    /// Points, in x order.
    pub points: Vec<(f64, f64)>,
}

/// Headroom above the largest value, so labels above bars fit.
fn y_limit(values: impl Iterator<Item = f64>) -> f64 {
    let max = values.filter(|v| v.is_finite()).fold(0.0, f64::max);
    if max > 0.0 { max * 1.18 } else { 1.0 }
}

/// `count` segments, one per bar. A segmented integer range includes its end, so `0..n`
/// would draw an empty extra segment.
fn segments(count: usize) -> SegmentedCoord<RangedCoordusize> {
    (0..count.saturating_sub(1)).into_segmented()
}

/// The x label of a bar chart's segment: its bar's label at the centre, nothing elsewhere.
fn segment_label(bars: &[(String, f64)]) -> impl Fn(&SegmentValue<usize>) -> String + '_ {
    move |value| match value {
        SegmentValue::CenterOf(i) => bars.get(*i).map(|(l, _)| l.clone()).unwrap_or_default(),
        _ => String::new(),
    }
}

/// Draws one bar per `(label, value)` from `floor` up (at least to `floor`), each in its
/// palette colour and topped by `text(value)`.
fn draw_bars<Y: Ranged<ValueType = f64>>(
    chart: &mut ChartContext<'_, SVGBackend<'_>, Cartesian2d<SegmentedCoord<RangedCoordusize>, Y>>,
    bars: &[(String, f64)],
    floor: f64,
    text: impl Fn(f64) -> String,
) -> Result<()> {
    chart.draw_series(bars.iter().enumerate().map(|(i, (_, value))| {
        let corners = [
            (SegmentValue::Exact(i), floor),
            (SegmentValue::Exact(i + 1), value.max(floor)),
        ];
        let mut bar = Rectangle::new(corners, PALETTE[i % PALETTE.len()].filled());
        bar.set_margin(0, 0, 18, 18);
        bar
    }))?;
    let value_style =
        TextStyle::from((FONT, 14).into_font()).pos(Pos::new(HPos::Center, VPos::Bottom));
    chart.draw_series(bars.iter().enumerate().map(|(i, (_, value))| {
        Text::new(
            text(*value),
            (SegmentValue::CenterOf(i), value.max(floor)),
            value_style.clone(),
        )
    }))?;
    Ok(())
}

/// A vertical bar chart with one labelled bar per `(label, value)`, the value printed above.
pub fn bar_chart(title: &str, y_label: &str, bars: &[(String, f64)]) -> Result<String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE)?;
        let y_max = y_limit(bars.iter().map(|(_, v)| *v));
        let mut chart = ChartBuilder::on(&root)
            .caption(title, (FONT, 20))
            .margin(16)
            .x_label_area_size(36)
            .y_label_area_size(64)
            .build_cartesian_2d(segments(bars.len()), 0.0..y_max)?;
        let label_of = segment_label(bars);
        let decimals = decimals_for(y_max);
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(bars.len().max(1))
            .x_label_formatter(&label_of)
            .y_label_formatter(&|v: &f64| format!("{v:.decimals$}"))
            .max_light_lines(1)
            .y_desc(y_label)
            .label_style((FONT, 14))
            .draw()?;
        draw_bars(&mut chart, bars, 0.0, |value| format!("{value:.1}"))?;
        root.present()?;
    }
    Ok(svg)
}

/// A bar per label on a base-10 logarithmic y axis (for values spanning orders of
/// magnitude, e.g. battery energy), each bar labelled with its value. Values must be
/// positive.
pub fn log_bar_chart(title: &str, y_label: &str, bars: &[(String, f64)]) -> Result<String> {
    let positive = || bars.iter().map(|(_, v)| *v).filter(|v| *v > 0.0);
    let low = positive().fold(f64::INFINITY, f64::min);
    let high = positive().fold(0.0, f64::max);
    let (y_min, y_max) = if high > 0.0 {
        (
            10f64.powf(low.log10().floor()),
            10f64.powf(high.log10().floor() + 1.0),
        )
    } else {
        (0.1, 1.0)
    };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, (FONT, 20))
            .margin(16)
            .x_label_area_size(36)
            .y_label_area_size(72)
            .build_cartesian_2d(segments(bars.len()), (y_min..y_max).log_scale())?;
        let label_of = segment_label(bars);
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(bars.len().max(1))
            .x_label_formatter(&label_of)
            .y_label_formatter(&|v: &f64| format!("{v}"))
            .y_desc(y_label)
            .label_style((FONT, 14))
            .draw()?;
        draw_bars(&mut chart, bars, y_min, |value| format!("{value}"))?;
        root.present()?;
    }
    Ok(svg)
}

/// A line chart over a base-2 logarithmic x axis (e.g. transfer sizes 64 .. 4096), with a
/// marker on every point and a legend. The x axis is labelled at exactly the x values of the
/// points (5, 10, 25, 50, 75, 100 % read as such, not as the powers of two between them,
/// and no rounded label sits between two sizes). The x values must be positive.
pub fn log2_line_chart(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
) -> Result<String> {
    let (x_min, x_max) = log2_x_range(series);
    let key_xs = log2_key_xs(series);
    let y_max = y_limit(series.iter().flat_map(|s| s.points.iter().map(|p| p.1)));
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE)?;
        let x_range = (log2_milli(x_min - 0.15)..log2_milli(x_max + 0.15)).with_key_points(key_xs);
        let mut chart = ChartBuilder::on(&root)
            .caption(title, (FONT, 20))
            .margin(16)
            .x_label_area_size(44)
            .y_label_area_size(64)
            .build_cartesian_2d(x_range, 0.0..y_max)?;
        let decimals = decimals_for(y_max);
        chart
            .configure_mesh()
            .x_label_formatter(&|x: &i64| log2_tick_label(*x))
            .y_label_formatter(&|v: &f64| format!("{v:.decimals$}"))
            .max_light_lines(1)
            .x_desc(x_label)
            .y_desc(y_label)
            .label_style((FONT, 14))
            .draw()?;
        for (index, line) in series.iter().enumerate() {
            let color = PALETTE[index % PALETTE.len()];
            let points: Vec<(i64, f64)> = log2_points(line)
                .into_iter()
                .map(|(x, y)| (log2_milli(x), y))
                .collect();
            chart
                .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))?
                .label(line.name.as_str())
                .legend(move |(x, y)| {
                    PathElement::new([(x, y), (x + 20, y)], color.stroke_width(2))
                });
            chart.draw_series(
                points
                    .into_iter()
                    .map(|p| Circle::new(p, 4, color.filled())),
            )?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK.mix(0.4))
            .label_font((FONT, 14))
            .draw()?;
        root.present()?;
    }
    Ok(svg)
}

/// A series' points with x replaced by its base-2 logarithm (x below 1 counts as 1).
fn log2_points(series: &Series) -> Vec<(f64, f64)> {
    series
        .points
        .iter()
        .map(|&(x, y)| (x.max(1.0).log2(), y))
        .collect()
}

/// The smallest and largest log2(x) of every point; a single distinct x, or none at all,
/// still gives a non-empty axis.
fn log2_x_range(series: &[Series]) -> (f64, f64) {
    let xs = || {
        series
            .iter()
            .flat_map(|s| log2_points(s).into_iter().map(|p| p.0))
    };
    let x_min = xs().fold(f64::INFINITY, f64::min);
    let x_max = xs().fold(f64::NEG_INFINITY, f64::max);
    if !x_min.is_finite() {
        (0.0, 1.0)
    } else if x_min < x_max {
        (x_min, x_max)
    } else {
        (x_min - 1.0, x_min + 1.0)
    }
}

/// Steps of a log2 chart's integer x axis per doubling of x.
const LOG2_STEPS: f64 = 1000.0;

/// log2(x) in thousandths: plotters formats labels at key points only on integer axes.
fn log2_milli(log2: f64) -> i64 {
    (log2 * LOG2_STEPS).round() as i64
}

/// The x of every point of every series, as [`log2_milli`] steps, sorted, each once: the
/// ticks of a log2 chart.
fn log2_key_xs(series: &[Series]) -> Vec<i64> {
    let mut key_xs: Vec<i64> = series
        .iter()
        .flat_map(log2_points)
        .map(|p| log2_milli(p.0))
        .collect();
    key_xs.sort_unstable();
    key_xs.dedup();
    key_xs
}

/// The label of a log2 chart's tick at `milli` steps: the x it stands for, a whole number
/// when it is one (sizes, counts, percentages), else with up to two decimals.
fn log2_tick_label(milli: i64) -> String {
    let x = (milli as f64 / LOG2_STEPS).exp2();
    // A thousandth of a doubling is 0.07 % of x: a whole number comes back within that.
    if (x - x.round()).abs() <= x * 1e-3 {
        format!("{}", x.round())
    } else {
        let text = format!("{x:.2}");
        text.trim_end_matches('0').trim_end_matches('.').to_owned()
    }
}

/// Pixel width of the legend panel right of a [`fitted_log2_line_chart`] or a
/// [`log_grouped_bar_chart`], at least.
const LEGEND_PANEL: u32 = 180;

/// Pixel width of a legend panel for `names`: the swatch, then the longest name whole (a
/// fixed panel cut "paper at 16×: throughput, writes (≤)" at its edge).
fn legend_panel<'a>(names: impl Iterator<Item = &'a str>) -> u32 {
    let longest = names.map(|name| name.chars().count()).max().unwrap_or(0);
    u32::try_from(36 + longest * LABEL_CHAR_PX + 8)
        .unwrap_or(u32::MAX)
        .max(LEGEND_PANEL)
}

/// A line chart over a base-2 logarithmic x axis, labelled at exactly the x values of the
/// points, whose y axis spans the data rather than starting at zero: made for relative
/// changes of a few per cent (0.92 .. 1.00), which a zero-based axis flattens. The legend sits
/// in a panel right of the plot, so it covers no line however many series there are.
pub fn fitted_log2_line_chart(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
) -> Result<String> {
    // plotters formats labels at key points only on integer axes: x is log2(x) in
    // thousandths.
    let milli = log2_milli;
    let (x_min, x_max) = log2_x_range(series);
    let key_xs = log2_key_xs(series);
    let (y_min, y_max) = fitted_y_range(series.iter().flat_map(|s| s.points.iter().map(|p| p.1)));
    let decimals = decimals_for(y_max - y_min);
    let panel = legend_panel(series.iter().map(|s| s.name.as_str()));
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (SIZE.0 + panel, SIZE.1)).into_drawing_area();
        root.fill(&WHITE)?;
        let (plot_area, legend_area) = root.split_horizontally(SIZE.0);
        let x_range = (milli(x_min - 0.15)..milli(x_max + 0.15)).with_key_points(key_xs);
        let mut chart = ChartBuilder::on(&plot_area)
            .caption(title, (FONT, 20))
            .margin(16)
            .x_label_area_size(44)
            .y_label_area_size(64)
            .build_cartesian_2d(x_range, y_min..y_max)?;
        chart
            .configure_mesh()
            .x_label_formatter(&|x: &i64| log2_tick_label(*x))
            .y_label_formatter(&|v: &f64| format!("{v:.decimals$}"))
            .max_light_lines(1)
            .x_desc(x_label)
            .y_desc(y_label)
            .label_style((FONT, 14))
            .draw()?;
        for (index, line) in series.iter().enumerate() {
            let color = PALETTE[index % PALETTE.len()];
            let points: Vec<(i64, f64)> = log2_points(line)
                .into_iter()
                .map(|(x, y)| (milli(x), y))
                .collect();
            chart.draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))?;
            chart.draw_series(
                points
                    .into_iter()
                    .map(|p| Circle::new(p, 4, color.filled())),
            )?;
        }
        draw_side_legend(
            &legend_area,
            series.iter().map(|s| s.name.as_str()),
            Swatch::Line,
        )?;
        root.present()?;
    }
    Ok(svg)
}

/// The y range of a fitted chart: the data's span plus 8 % on each side (a flat series gets
/// ±5 % of its value, or ±0.5 around zero).
fn fitted_y_range(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (min, max) = values
        .filter(|v| v.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        });
    if !min.is_finite() {
        return (0.0, 1.0);
    }
    let span = max - min;
    if span > 0.0 {
        (min - 0.08 * span, max + 0.08 * span)
    } else {
        let pad = if min == 0.0 { 0.5 } else { 0.05 * min.abs() };
        (min - pad, max + pad)
    }
}

/// Decimals of the y labels of an axis spanning `span`: enough to tell the ticks apart (an
/// axis of ratios up to 0.5 labelled without decimals reads 0, 0, 0, 0, 1).
fn decimals_for(span: f64) -> usize {
    match span {
        s if s < 0.1 => 3,
        s if s < 1.0 => 2,
        s if s < 10.0 => 1,
        _ => 0,
    }
}

/// What a legend entry shows beside its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Swatch {
    /// A line with a point, for line charts.
    Line,
    /// A filled square, for bar charts.
    Bar,
}

/// A legend drawn in its own area: a coloured swatch and the name per series, top down, in
/// palette order (the order the series were drawn in).
fn draw_side_legend<'a>(
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    names: impl Iterator<Item = &'a str>,
    swatch: Swatch,
) -> Result<()> {
    let style = TextStyle::from((FONT, 14).into_font()).pos(Pos::new(HPos::Left, VPos::Center));
    for (index, name) in names.enumerate() {
        let y = 56 + 22 * i32::try_from(index).unwrap_or(i32::MAX / 32);
        let color = PALETTE[index % PALETTE.len()];
        match swatch {
            Swatch::Line => {
                area.draw(&PathElement::new([(4, y), (28, y)], color.stroke_width(3)))?;
                area.draw(&Circle::new((16, y), 4, color.filled()))?;
            }
            Swatch::Bar => {
                area.draw(&Rectangle::new([(9, y - 7), (23, y + 7)], color.filled()))?;
            }
        }
        area.draw(&Text::new(name.to_owned(), (36, y), style.clone()))?;
    }
    Ok(())
}

/// One series of a grouped bar chart: a value per category, `None` where it has no bar.
#[derive(Clone, Debug)]
pub struct BarSeries {
    /// Legend entry.
    pub name: String,
    /// One value per category, in category order.
    pub values: Vec<Option<f64>>,
}

/// Steps of the integer x axis per category of a grouped bar chart.
const SLOTS: i64 = 1000;

/// Height share of the plot one legend entry takes (about 20 of 300 pixels): the y axis
/// leaves that much room above the tallest bar, so the legend never covers a bar.
const LEGEND_ENTRY_SHARE: f64 = 0.07;

/// Bars grouped by category along the x axis, one colour per series, with a legend. The
/// chart widens with the number of bars so that bars and category labels stay readable.
pub fn grouped_bar_chart(
    title: &str,
    y_label: &str,
    categories: &[String],
    series: &[BarSeries],
) -> Result<String> {
    grouped_chart(title, y_label, categories, series, None)
}

/// [`grouped_bar_chart`] of ratios, with a dashed line across the plot at 1.0 (equal), the
/// axis reaching at least that high, so a bar reads at a glance as above or below it.
pub fn grouped_ratio_chart(
    title: &str,
    y_label: &str,
    categories: &[String],
    series: &[BarSeries],
) -> Result<String> {
    grouped_chart(title, y_label, categories, series, Some(1.0))
}

fn grouped_chart(
    title: &str,
    y_label: &str,
    categories: &[String],
    series: &[BarSeries],
    reference: Option<f64>,
) -> Result<String> {
    let max = series_values(series).chain(reference).fold(0.0, f64::max);
    let legend_share = legend_share(series.len());
    let y_max = if max > 0.0 {
        max / (1.0 - legend_share)
    } else {
        1.0
    };
    let decimals = decimals_for(y_max);
    let mut svg = String::new();
    {
        let width = grouped_width(categories, series.len());
        let root = SVGBackend::with_string(&mut svg, (width, SIZE.1)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = grouped_builder(&root, title)
            .build_cartesian_2d(category_axis(categories.len()), 0.0..y_max)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_label_formatter(&category_label(categories))
            .y_label_formatter(&|v: &f64| format!("{v:.decimals$}"))
            .max_light_lines(1)
            .y_desc(y_label)
            .label_style((FONT, 14))
            .draw()?;
        draw_grouped(&mut chart, series, 0.0, None)?;
        if let Some(level) = reference {
            let end = categories.len().max(1) as i64 * SLOTS;
            chart.draw_series(DashedLineSeries::new(
                [(0, level), (end, level)],
                6,
                4,
                BLACK.stroke_width(1),
            ))?;
        }
        draw_legend(&mut chart)?;
        root.present()?;
    }
    Ok(svg)
}

/// A grouped bar chart on a base-10 logarithmic y axis, for series whose values span orders
/// of magnitude (a linear axis would flatten the small bars to nothing): ticks at every
/// decade and at 2x and 5x in SI notation (1k, 2k, 5k, 10k), each bar labelled with its
/// value, the legend in a panel right of the plot. Values that are not positive get no bar.
pub fn log_grouped_bar_chart(
    title: &str,
    y_label: &str,
    categories: &[String],
    series: &[BarSeries],
) -> Result<String> {
    let (y_min, y_max) = log_y_range(series_values(series));
    let mut svg = String::new();
    {
        let width = grouped_width(categories, series.len());
        let panel = legend_panel(series.iter().map(|s| s.name.as_str()));
        let root = SVGBackend::with_string(&mut svg, (width + panel, SIZE.1)).into_drawing_area();
        root.fill(&WHITE)?;
        let (plot_area, legend_area) = root.split_horizontally(width);
        let mut chart = grouped_builder(&plot_area, title).build_cartesian_2d(
            category_axis(categories.len()),
            (y_min..y_max)
                .log_scale()
                .with_key_points(log_ticks(y_min, y_max)),
        )?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_label_formatter(&category_label(categories))
            .y_label_formatter(&|v: &f64| si(*v))
            .y_desc(y_label)
            .label_style((FONT, 14))
            .draw()?;
        draw_grouped(&mut chart, series, y_min, Some(&si))?;
        draw_side_legend(
            &legend_area,
            series.iter().map(|s| s.name.as_str()),
            Swatch::Bar,
        )?;
        root.present()?;
    }
    Ok(svg)
}

/// Every finite value of every series.
fn series_values(series: &[BarSeries]) -> impl Iterator<Item = f64> + '_ {
    series
        .iter()
        .flat_map(|s| s.values.iter().flatten().copied())
        .filter(|v| v.is_finite())
}

/// Height share above the tallest bar that the legend (and its margin) takes.
fn legend_share(entries: usize) -> f64 {
    (LEGEND_ENTRY_SHARE * entries as f64 + 0.05).min(0.6)
}

/// The y range of a log chart: from a decade at least half a decade below the smallest
/// positive value (so its bar has height), and high enough that a bar's label stays clear
/// above the tallest bar.
fn log_y_range(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (low, high) = values
        .filter(|v| *v > 0.0)
        .fold((f64::INFINITY, 0.0f64), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        });
    if high <= 0.0 {
        return (1.0, 10.0);
    }
    let bottom = (low.log10() - 0.5).floor();
    // Bars need at least one decade of height to compare.
    let top = high.log10().max(bottom + 1.0);
    let padded = top + (top - bottom) * LOG_LABEL_SHARE / (1.0 - LOG_LABEL_SHARE);
    (10f64.powf(bottom), 10f64.powf(padded))
}

/// Height share a bar's rotated value label takes above it on a log chart.
const LOG_LABEL_SHARE: f64 = 0.12;

/// Tick values of a log axis: every 1, 2 and 5 times a power of ten within the range.
fn log_ticks(y_min: f64, y_max: f64) -> Vec<f64> {
    let first = y_min.log10().floor() as i32;
    let last = y_max.log10().ceil() as i32;
    (first..=last)
        .flat_map(|e| [1.0, 2.0, 5.0].map(|m| m * 10f64.powi(e)))
        .filter(|v| *v >= y_min * (1.0 - 1e-9) && *v <= y_max)
        .collect()
}

/// A number in SI notation with at most three significant digits: 950, 1.2k, 45k, 2.8M.
pub fn si(value: f64) -> String {
    let (scaled, suffix) = [(1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")]
        .iter()
        .find(|(unit, _)| value.abs() >= *unit)
        .map_or((value, ""), |(unit, suffix)| (value / unit, *suffix));
    let decimals = match scaled.abs() {
        v if v >= 100.0 || v == v.trunc() => 0,
        v if v >= 10.0 => 1,
        _ => 2,
    };
    let text = format!("{scaled:.decimals$}");
    let text = if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        text
    };
    format!("{text}{suffix}")
}

/// Caption, margins and label areas of a grouped bar chart.
fn grouped_builder<'a, 'b>(
    root: &'a DrawingArea<SVGBackend<'b>, plotters::coord::Shift>,
    title: &str,
) -> ChartBuilder<'a, 'b, SVGBackend<'b>> {
    let mut builder = ChartBuilder::on(root);
    builder
        .caption(title, (FONT, 20))
        .margin(16)
        .x_label_area_size(36)
        .y_label_area_size(72);
    builder
}

/// Category `i` spans [i, i + 1) in units of `SLOTS` steps (an integer axis, whose labels
/// plotters can format), and its label sits at its centre.
fn category_axis(count: usize) -> WithKeyPoints<RangedCoordi64> {
    let count = count.max(1) as i64;
    let centres: Vec<i64> = (0..count).map(|i| i * SLOTS + SLOTS / 2).collect();
    RangedCoordi64::from(0..count * SLOTS).with_key_points(centres)
}

/// The x label at `x`: the category's name at its centre, nothing elsewhere.
fn category_label(categories: &[String]) -> impl Fn(&i64) -> String + '_ {
    move |x| {
        let centred = x.rem_euclid(SLOTS) == SLOTS / 2;
        let category = usize::try_from(x.div_euclid(SLOTS)).ok();
        category
            .filter(|_| centred)
            .and_then(|index| categories.get(index).cloned())
            .unwrap_or_default()
    }
}

/// The bars of every series from `floor` up, and (given `label`) each bar's value written
/// upwards above it. The bars of a category fill its middle 80 %, one slot
/// each, with a small gap.
fn draw_grouped<'a, 'b: 'a, X, Y>(
    chart: &mut ChartContext<'a, SVGBackend<'b>, Cartesian2d<X, Y>>,
    series: &[BarSeries],
    floor: f64,
    label: Option<&dyn Fn(f64) -> String>,
) -> Result<()>
where
    X: Ranged<ValueType = i64>,
    Y: Ranged<ValueType = f64>,
{
    let bar_width = SLOTS * 8 / 10 / series.len().max(1) as i64;
    let bars_of = |index: usize, line: &BarSeries| -> Vec<(i64, f64)> {
        line.values
            .iter()
            .enumerate()
            .filter_map(|(category, value)| {
                let left = category as i64 * SLOTS + SLOTS / 10 + index as i64 * bar_width;
                value
                    .filter(|v| v.is_finite() && *v > floor)
                    .map(|v| (left, v))
            })
            .collect()
    };
    for (index, line) in series.iter().enumerate() {
        let color = PALETTE[index % PALETTE.len()];
        let bars = bars_of(index, line);
        let rectangles = bars.iter().map(|&(left, value)| {
            Rectangle::new(
                [(left, floor), (left + bar_width * 9 / 10, value)],
                color.filled(),
            )
        });
        chart
            .draw_series(rectangles)?
            .label(line.name.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], color.filled()));
        if let Some(text) = label {
            let style = TextStyle::from((FONT, 11).into_font())
                .transform(FontTransform::Rotate270)
                .pos(Pos::new(HPos::Left, VPos::Center));
            chart.draw_series(bars.iter().map(|&(left, value)| {
                Text::new(
                    format!(" {}", text(value)),
                    (left + bar_width * 9 / 20, value),
                    style.clone(),
                )
            }))?;
        }
    }
    Ok(())
}

/// The legend of the series drawn so far, inside the plot at its upper right.
fn draw_legend<'a, 'b: 'a, X, Y>(
    chart: &mut ChartContext<'a, SVGBackend<'b>, Cartesian2d<X, Y>>,
) -> Result<()>
where
    X: Ranged<ValueType = i64>,
    Y: Ranged<ValueType = f64>,
{
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK.mix(0.4))
        .label_font((FONT, 14))
        .draw()?;
    Ok(())
}

/// Pixels a character of a category label takes at most on average: plotters writes the
/// labels' size 14 as an 11.3-pixel sans-serif font, where a browser draws
/// `linear_regression` about 90 pixels wide.
const LABEL_CHAR_PX: usize = 7;

/// Pixel width of a grouped bar chart: room for every bar and for every category label with
/// a gap beside it, so that long names (`linear_regression`, `matrix_multiply`) neither run
/// into each other nor past the plot's end.
fn grouped_width(categories: &[String], series: usize) -> u32 {
    let longest = categories
        .iter()
        .map(|c| c.chars().count())
        .max()
        .unwrap_or(0);
    let per_category = (series * 18).max(80).max(longest * LABEL_CHAR_PX + 16);
    u32::try_from(categories.len() * per_category + 140)
        .unwrap_or(u32::MAX)
        .max(SIZE.0)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn bar_chart_has_labels_values_and_bars() {
        let bars = [("clwb".to_owned(), 41.25), ("clflush".to_owned(), 180.0)];
        let svg = bar_chart("Persist <64 B>", "ns", &bars).expect("chart");
        assert!(svg.starts_with("<svg"));
        for text in ["clwb", "clflush", "41.2", "180.0", "Persist &lt;64 B&gt;"] {
            assert!(svg.contains(text), "{text} missing");
        }
        assert!(
            svg.matches("<rect").count() >= 3,
            "background plus two bars"
        );
    }

    #[test]
    fn line_chart_labels_sizes_in_bytes() {
        let series = [
            Series {
                name: "non-temporal".into(),
                points: vec![(64.0, 20.0), (4096.0, 300.0)],
            },
            Series {
                name: "store + clwb".into(),
                points: vec![(64.0, 30.0), (4096.0, 250.0)],
            },
        ];
        let svg = log2_line_chart("Copy", "bytes", "ns/op", &series).expect("chart");
        for text in ["non-temporal", "store + clwb", "4096", "64", "ns/op"] {
            assert!(svg.contains(text), "{text} missing");
        }
    }

    /// The x labels of a chart's axis, in order (plotters writes each label on a line of
    /// its own inside a `<text>` element).
    pub(crate) fn text_labels(svg: &str) -> Vec<String> {
        svg.split("<text")
            .skip(1)
            .filter_map(|element| {
                let body = element.split_once('>')?.1.split_once("</text>")?.0;
                Some(body.trim().to_owned())
            })
            .collect()
    }

    /// The page micro-benchmark's x values (5–100 % of a page) label its axis, not the
    /// powers of two between them, and two sizes never get a rounded label between them.
    #[test]
    fn a_log2_chart_ticks_exactly_the_data_xs() {
        let percents = [5.0, 10.0, 25.0, 50.0, 75.0, 100.0];
        let series = [Series {
            name: "nvthreads".into(),
            points: percents.iter().map(|&p| (p, p * 10.0)).collect(),
        }];
        let svg = log2_line_chart("Pages", "% of each page", "slowdown", &series).expect("chart");
        let labels = text_labels(&svg);
        for percent in ["5", "10", "25", "50", "75", "100"] {
            assert!(labels.iter().any(|l| l == percent), "{percent}: {labels:?}");
        }
        for power in ["8", "16", "32", "64"] {
            assert!(!labels.iter().any(|l| l == power), "{power}: {labels:?}");
        }
        let two_sizes = [Series {
            name: "copy".into(),
            points: vec![(64.0, 1.0), (128.0, 2.0)],
        }];
        let labels = text_labels(&log2_line_chart("Copy", "B", "ns", &two_sizes).expect("chart"));
        let xs: Vec<&String> = labels
            .iter()
            .filter(|l| l.parse::<f64>().is_ok_and(|v| v >= 60.0))
            .collect();
        assert_eq!(xs, ["64", "128"], "{labels:?}");
        assert_eq!(log2_tick_label(log2_milli(1.5f64.log2())), "1.5");
        assert_eq!(log2_tick_label(log2_milli(4096f64.log2())), "4096");
    }

    #[test]
    fn degenerate_inputs_still_draw() {
        bar_chart("empty", "ns", &[]).expect("no bars");
        bar_chart("zero", "ns", &[("a".into(), 0.0)]).expect("zero bar");
        let one_point = [Series {
            name: "one".into(),
            points: vec![(64.0, 1.0)],
        }];
        log2_line_chart("one", "x", "y", &one_point).expect("one point");
        log2_line_chart("none", "x", "y", &[]).expect("no series");
    }

    #[test]
    fn fitted_chart_labels_the_data_xs_and_every_series() {
        let series = [
            Series {
                name: "hash".into(),
                points: vec![(8.0, 1.0), (32.0, 0.98), (128.0, 0.95)],
            },
            Series {
                name: "geomean <all>".into(),
                points: vec![(8.0, 1.0), (128.0, 0.96)],
            },
        ];
        let svg =
            fitted_log2_line_chart("Latency", "cycles", "× 8 cycles", &series).expect("chart");
        for text in [
            "hash",
            "geomean &lt;all&gt;",
            // plotters writes each label on a line of its own.
            "\n8\n",
            "\n32\n",
            "\n128\n",
            "cycles",
        ] {
            assert!(svg.contains(text), "{text} missing");
        }
        // The y axis is fitted: its labels have the decimals a 5 % span needs.
        assert!(svg.contains("0.96"), "no fine y labels");
        fitted_log2_line_chart("none", "x", "y", &[]).expect("no series");
        let (low, high) = fitted_y_range([2.0, 2.0].into_iter());
        assert!((low - 1.9).abs() < 1e-12 && (high - 2.1).abs() < 1e-12);
        assert_eq!(decimals_for(0.05), 3);
    }

    #[test]
    fn grouped_bar_chart_draws_every_bar_and_legend_entry() {
        let categories = ["array".to_owned(), "hash <20%>".to_owned()];
        let series = [
            BarSeries {
                name: "redo".into(),
                values: vec![Some(800.0), Some(700.0)],
            },
            BarSeries {
                name: "pmdk".into(),
                values: vec![Some(500.0), None],
            },
        ];
        let svg = grouped_bar_chart("Throughput", "Kops/s", &categories, &series).expect("chart");
        for text in ["array", "hash &lt;20%&gt;", "redo", "pmdk", "Kops/s"] {
            assert!(svg.contains(text), "{text} missing");
        }
        // Background, three bars, two legend swatches (and the legend box).
        assert!(svg.matches("<rect").count() >= 6, "{svg}");
        grouped_bar_chart("empty", "x", &[], &[]).expect("no bars");
        let many: Vec<String> = (0..40).map(|i| format!("c{i}")).collect();
        assert!(
            grouped_width(&many, 6) > SIZE.0,
            "many bars widen the chart"
        );
    }

    /// The `x` and the text of every `<text>` element of an SVG chart.
    fn placed_texts(svg: &str) -> Vec<(f64, String)> {
        svg.split("<text")
            .skip(1)
            .filter_map(|element| {
                let x = element
                    .split("x=\"")
                    .nth(1)?
                    .split('"')
                    .next()?
                    .parse()
                    .ok()?;
                let body = element.split_once('>')?.1.split_once("</text>")?.0;
                Some((x, body.trim().to_owned()))
            })
            .collect()
    }

    /// The NVthreads kernels' names under their bars: each centred label keeps clear of its
    /// neighbours (at 6.5 pixels a character, what a browser draws at plotters' label
    /// size), and the last one of the plot's right end.
    #[test]
    fn long_category_labels_do_not_run_into_each_other() {
        let names = [
            "histogram",
            "kmeans",
            "linear_regression",
            "matrix_multiply",
            "pca",
            "string_match",
            "word_count",
            "reverse_index",
        ];
        let categories: Vec<String> = names.iter().map(|&n| n.to_owned()).collect();
        let series = [
            BarSeries {
                name: "shared".into(),
                values: vec![Some(2.0); names.len()],
            },
            BarSeries {
                name: "persistent".into(),
                values: vec![Some(5.0); names.len()],
            },
        ];
        let svg = grouped_bar_chart("Kernels", "slowdown", &categories, &series).expect("chart");
        let texts = placed_texts(&svg);
        let centres: Vec<(f64, &str)> = names
            .iter()
            .map(|&name| {
                let (x, _) = texts
                    .iter()
                    .find(|(_, text)| text == name)
                    .unwrap_or_else(|| panic!("{name} missing"));
                (*x, name)
            })
            .collect();
        let half = |name: &str| name.len() as f64 * 6.5 / 2.0;
        for pair in centres.windows(2) {
            let [(left_x, left), (right_x, right)] = [pair[0], pair[1]];
            assert!(
                right_x - left_x >= half(left) + half(right) + 4.0,
                "{left} at {left_x} and {right} at {right_x} overlap"
            );
        }
        let width: f64 = svg
            .split("width=\"")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .and_then(|w| w.parse().ok())
            .expect("svg width");
        let (last_x, last) = centres[centres.len() - 1];
        assert!(last_x + half(last) <= width, "{last} runs past {width}");
    }

    /// The colour of each legend swatch of a chart with a side legend (its lines are 3
    /// pixels wide, the plotted lines 2).
    pub(crate) fn legend_colours(svg: &str) -> Vec<String> {
        svg.split("<polyline")
            .skip(1)
            .filter(|element| element.contains("stroke-width=\"3\""))
            .filter_map(|element| {
                Some(
                    element
                        .split("stroke=\"")
                        .nth(1)?
                        .split('"')
                        .next()?
                        .to_owned(),
                )
            })
            .collect()
    }

    /// The SVG's width attribute.
    fn svg_width(svg: &str) -> f64 {
        svg.split("width=\"")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .and_then(|w| w.parse().ok())
            .expect("svg width")
    }

    /// The Silo transaction-size sweep's eleven series (seven workloads, their mean, the
    /// mean write growth, the paper's two marks): every one its own colour, and every
    /// legend name whole inside the picture (a fixed 180-pixel panel cut the longest).
    #[test]
    fn a_side_legend_has_a_colour_per_series_and_room_for_its_longest_name() {
        let long = "paper at 16×: throughput, writes (≤)";
        let series: Vec<Series> = (0..10)
            .map(|i| Series {
                name: format!("series {i}"),
                points: vec![(1.0, 1.0), (16.0, 0.9 + f64::from(i) / 100.0)],
            })
            .chain(std::iter::once(Series {
                name: long.to_owned(),
                points: vec![(16.0, 1.9)],
            }))
            .collect();
        let svg = fitted_log2_line_chart("Transaction size", "x", "y", &series).expect("chart");
        let colours = legend_colours(&svg);
        let mut distinct = colours.clone();
        distinct.sort();
        distinct.dedup();
        assert_eq!(colours.len(), 11, "{colours:?}");
        assert_eq!(distinct.len(), 11, "a colour used twice: {colours:?}");
        let (x, _) = placed_texts(&svg)
            .into_iter()
            .find(|(_, text)| text.contains("paper at 16×"))
            .expect("the long name");
        let end = x + long.chars().count() as f64 * 6.5;
        assert!(
            end <= svg_width(&svg),
            "the name ends at {end}, past {}",
            svg_width(&svg)
        );
    }

    /// Bar and line charts of small values (ratios below 1) label their y ticks with the
    /// decimals that tell them apart, not "0, 0, 0, 1".
    #[test]
    fn small_values_get_distinct_y_tick_labels() {
        let bars = [("a".to_owned(), 0.2), ("b".to_owned(), 0.45)];
        let line = [Series {
            name: "ratio".into(),
            points: vec![(1.0, 0.1), (2.0, 0.4)],
        }];
        let grouped = [BarSeries {
            name: "ratio".into(),
            values: vec![Some(0.2), Some(0.3)],
        }];
        let categories = ["x".to_owned(), "y".to_owned()];
        for svg in [
            bar_chart("small", "ratio", &bars).expect("bar chart"),
            log2_line_chart("small", "n", "ratio", &line).expect("line chart"),
            grouped_bar_chart("small", "ratio", &categories, &grouped).expect("grouped chart"),
        ] {
            let ticks: Vec<String> = text_labels(&svg)
                .into_iter()
                .filter(|label| label.parse::<f64>().is_ok_and(|v| v < 1.0))
                .collect();
            let mut distinct = ticks.clone();
            distinct.sort();
            distinct.dedup();
            assert!(ticks.len() >= 3, "{ticks:?}");
            assert_eq!(
                distinct.len(),
                ticks.len(),
                "repeated tick labels: {ticks:?}"
            );
        }
    }

    /// A ratio chart's axis reaches 1.0 even when every bar is far below it, and a dashed
    /// line (its segments: polylines a plain bar chart has none of) marks it.
    #[test]
    fn a_ratio_chart_marks_equal_with_a_line() {
        let categories = vec!["+0 ns".to_owned(), "+300 ns".to_owned()];
        let series = vec![BarSeries {
            name: "mvcc ÷ redo".into(),
            values: vec![Some(0.3), Some(0.4)],
        }];
        let plain = grouped_bar_chart("r", "ratio", &categories, &series).expect("chart");
        let ratio = grouped_ratio_chart("r", "ratio", &categories, &series).expect("chart");
        assert!(ratio.contains("\n1.0\n"), "{ratio}");
        assert!(!plain.contains("\n1.0\n"), "{plain}");
        let lines = |svg: &str| svg.matches("<polyline").count() + svg.matches("<line").count();
        assert!(lines(&ratio) > lines(&plain) + 4, "dashes drawn");
    }

    /// Heights of the bars of an SVG chart: the filled rectangles in a palette colour.
    pub(crate) fn bar_heights(svg: &str) -> Vec<f64> {
        let colours: Vec<String> = PALETTE
            .iter()
            .map(|c| format!("fill=\"#{:02X}{:02X}{:02X}\"", c.0, c.1, c.2))
            .collect();
        svg.split("<rect ")
            .skip(1)
            .filter_map(|rest| rest.split('>').next())
            .filter(|rect| colours.iter().any(|c| rect.contains(c.as_str())))
            .filter_map(|rect| {
                let height = rect.split("height=\"").nth(1)?.split('"').next()?;
                height.parse().ok()
            })
            .collect()
    }

    #[test]
    fn a_log_grouped_chart_keeps_bars_three_decades_apart_readable() {
        let categories = ["randwrite 4096".to_owned()];
        let series = [
            BarSeries {
                name: "preload".into(),
                values: vec![Some(2_000_000.0)],
            },
            BarSeries {
                name: "FUSE".into(),
                values: vec![Some(2_000.0)],
            },
            BarSeries {
                name: "skipped".into(),
                values: vec![None],
            },
        ];
        let log = log_grouped_bar_chart("fio", "IOPS", &categories, &series).expect("chart");
        let heights = bar_heights(&log);
        assert_eq!(
            heights.len(),
            2 + 3,
            "two bars and three legend swatches: {heights:?}"
        );
        assert!(
            heights[1] >= 40.0,
            "the small bar stays readable: {heights:?}"
        );
        assert!(heights[0] > heights[1] * 2.0, "and smaller: {heights:?}");
        for text in ["2M", "2k", "preload", "FUSE", "skipped", "IOPS"] {
            assert!(log.contains(text), "{text} missing");
        }
        // The same values on a linear axis: the small bar is under a pixel.
        let linear = grouped_bar_chart("fio", "IOPS", &categories, &series).expect("chart");
        assert!(bar_heights(&linear)[1] < 1.0, "{:?}", bar_heights(&linear));
    }

    #[test]
    fn log_ticks_and_si_labels() {
        assert_eq!(log_ticks(1000.0, 6000.0), vec![1000.0, 2000.0, 5000.0]);
        let (low, high) = log_y_range([3_000.0, 2_500_000.0].into_iter());
        assert_eq!(low, 100.0, "half a decade under 3,000 is under 1,000");
        assert!(high > 2_500_000.0 * 2.0, "room for the labels: {high}");
        assert_eq!(log_y_range(std::iter::empty()), (1.0, 10.0));
        let labels: Vec<String> = [950.0, 1000.0, 1234.0, 45_600.0, 2_790_000.0, 0.5]
            .iter()
            .map(|v| si(*v))
            .collect();
        assert_eq!(labels, ["950", "1k", "1.23k", "45.6k", "2.79M", "0.5"]);
    }
}
