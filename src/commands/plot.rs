//! Pictures of results, drawn with `plotters` into SVG (PNG by rasterising that SVG): a
//! test's per-stream receiver rate over time with the sum on its own axis, block and kernel
//! RTT, and fairness per interval; a comparison's Gbit/s and Gbit/s per busy core against
//! the swept dimension, one curve per other combination. Runs on the caller's thread
//! (`pinperf plot`, `report`, or the client's reporter at the end of a `--plot` run).
//! Plots draw the report model and compute nothing beyond picking scales.

use std::error::Error as StdError;
use std::path::Path;

use plotters::chart::DualCoordChartContext;
use plotters::coord::Shift;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use crate::commands::compare::{CompareDoc, CompareRow};
use crate::error::{Error, Result};
use crate::report::format::json::Document;
use crate::report::model::{IntervalReport, LeftOut, SumRow, UdpFigures};
use crate::units::format_size;

type Drawn = std::result::Result<(), Box<dyn StdError>>;

const FONT: &str = "sans-serif";
/// Up to this many streams every line gets a legend entry with its name.
const NAMED_STREAMS: usize = 16;

/// One direction's picture is this tall (its three panels and title).
const PICTURE_HEIGHT: u32 = 940;

/// Distinct colours for a few lines (Tableau 10), evenly spaced hues beyond.
fn colour(i: usize, n: usize) -> RGBAColor {
    const TEN: [(u8, u8, u8); 10] = [
        (31, 119, 180),
        (255, 127, 14),
        (44, 160, 44),
        (214, 39, 40),
        (148, 103, 189),
        (140, 86, 75),
        (227, 119, 194),
        (127, 127, 127),
        (188, 189, 34),
        (23, 190, 207),
    ];
    if n <= TEN.len() {
        let (r, g, b) = TEN[i % TEN.len()];
        RGBColor(r, g, b).to_rgba()
    } else {
        let l = if i.is_multiple_of(2) { 0.42 } else { 0.55 };
        HSLColor(i as f64 / n as f64 * 0.92, 0.75, l).to_rgba()
    }
}

/// How a legend entry is drawn.
#[derive(Clone, Copy)]
enum Mark {
    Line(u32),
    Dashed,
    Cross,
    Band,
}

struct Entry {
    label: String,
    colour: RGBAColor,
    mark: Mark,
}

fn entry(label: impl Into<String>, colour: RGBAColor, mark: Mark) -> Entry {
    Entry {
        label: label.into(),
        colour,
        mark,
    }
}

/// Draws a legend into its own area beside a chart: the `wide` entries one to a row,
/// then the `grid` entries (many streams' ids) in as many columns as they need.
fn legend(area: &DrawingArea<SVGBackend<'_>, Shift>, wide: &[Entry], grid: &[Entry]) -> Drawn {
    let (w, h) = area.dim_in_pixel();
    let row_h = 15i32;
    let top = 30 + row_h * wide.len() as i32;
    let rows = ((h as i32 - top) / row_h).max(1) as usize;
    let cols = grid.len().div_ceil(rows).max(1);
    let col_w = (w as i32 - 6) / cols as i32;
    let places = (0..wide.len())
        .map(|k| (4, 30 + k as i32 * row_h))
        .chain((0..grid.len()).map(|k| {
            (
                4 + (k / rows) as i32 * col_w,
                top + (k % rows) as i32 * row_h,
            )
        }));
    for (e, (x, y)) in wide.iter().chain(grid).zip(places) {
        let style = e.colour.stroke_width(2);
        match e.mark {
            Mark::Line(width) => {
                area.draw(&PathElement::new(
                    vec![(x, y), (x + 18, y)],
                    e.colour.stroke_width(width),
                ))?;
            }
            Mark::Dashed => {
                area.draw(&PathElement::new(vec![(x, y), (x + 6, y)], style))?;
                area.draw(&PathElement::new(vec![(x + 12, y), (x + 18, y)], style))?;
            }
            Mark::Cross => area.draw(&Cross::new((x + 9, y), 4, style))?,
            Mark::Band => area.draw(&Rectangle::new(
                [(x, y - 5), (x + 18, y + 5)],
                e.colour.filled(),
            ))?,
        }
        area.draw(&Text::new(
            e.label.clone(),
            (x + 22, y - 6),
            (FONT, 12).into_font(),
        ))?;
    }
    Ok(())
}

/// A rate axis's unit for values up to `max_bps`: (divisor, name).
fn rate_unit(max_bps: f64) -> (f64, &'static str) {
    if max_bps >= 2e9 {
        (1e9, "Gbit/s")
    } else if max_bps >= 2e6 {
        (1e6, "Mbit/s")
    } else {
        (1e3, "kbit/s")
    }
}

/// The test's picture: three panels over the test's time; `--bidir` draws one such
/// picture per direction, client to server above (the two directions' rows would share
/// the time axis and their fairness means nothing across both).
pub(crate) fn test_svg(doc: &Document, lab_rate_bps: Option<u64>, title: &str) -> Result<String> {
    let ways: Vec<(Document, String)> = match doc.start.direction {
        crate::wire::params::Direction::Bidir => {
            [(false, "client to server"), (true, "server to client")]
                .into_iter()
                .map(|(reverse, way)| {
                    let mut d = doc.clone();
                    d.intervals.retain(|iv| iv.reverse == reverse);
                    (d, format!("{title}: {way} (--bidir)"))
                })
                .collect()
        }
        _ => vec![(doc.clone(), title.to_string())],
    };
    let n =
        usize::from(doc.start.streams).max(doc.intervals.first().map_or(0, |iv| iv.streams.len()));
    let legend_w = match n {
        0..=NAMED_STREAMS => 170,
        _ => 60 * n.div_ceil(22) as u32 + 10,
    };
    let mut svg = String::new();
    let drawn = (|| -> Drawn {
        let height = PICTURE_HEIGHT * ways.len() as u32;
        let root = SVGBackend::with_string(&mut svg, (900 + legend_w, height)).into_drawing_area();
        root.fill(&WHITE)?;
        for (area, (d, t)) in root.split_evenly((ways.len(), 1)).iter().zip(&ways) {
            draw_test(area, d, n, lab_rate_bps, t)?;
        }
        root.present()?;
        Ok(())
    })();
    drawn.map_err(|e| Error::Test(format!("draw the plot: {e}")))?;
    Ok(svg)
}

/// What every panel of a direction's picture shares: its rows, the time axis's end, and
/// whether the points are few enough to mark each one.
struct Timeline<'d> {
    ivs: &'d [IntervalReport],
    t_end: f64,
    markers: bool,
}

/// The middle of a row's span, where its point is drawn.
fn mid_t(start: f64, end: f64) -> f64 {
    (start + end) / 2.0
}

/// A panel's chart over the test's time: its caption, and room for both y axes' labels.
fn time_chart<'a, 'b>(
    area: &'a DrawingArea<SVGBackend<'b>, Shift>,
    caption: impl AsRef<str>,
) -> ChartBuilder<'a, 'static, SVGBackend<'b>> {
    let mut builder = ChartBuilder::on(area);
    builder
        .caption(caption, (FONT, 16))
        .margin(8)
        .x_label_area_size(36)
        .y_label_area_size(70)
        .right_y_label_area_size(70);
    builder
}

/// A line through `points` on the chart's (left) axes and, with `markers`, a dot at each.
fn draw_line<CT: CoordTranslate<From = (f64, f64)>>(
    chart: &mut ChartContext<'_, SVGBackend<'_>, CT>,
    points: &[(f64, f64)],
    (c, width): (RGBAColor, u32),
    markers: bool,
) -> Drawn {
    chart.draw_series(LineSeries::new(points.to_vec(), c.stroke_width(width)))?;
    if markers {
        chart.draw_series(points.iter().map(|&p| Circle::new(p, 2, c.filled())))?;
    }
    Ok(())
}

/// One direction's picture in `area`, `n` streams: rates, then RTT (or UDP's loss and
/// jitter), then fairness.
fn draw_test(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    doc: &Document,
    n: usize,
    lab_rate_bps: Option<u64>,
    title: &str,
) -> Drawn {
    let ivs = &doc.intervals;
    let root = area.titled(title, (FONT, 20))?;
    let (top, rest) = root.split_vertically(440);
    let (mid, bottom) = rest.split_vertically(250);
    let t_end = ivs
        .iter()
        .map(|iv| iv.sum.end)
        .fold(doc.start.run_time_s(), f64::max)
        .max(0.1);
    let time = Timeline {
        ivs,
        t_end,
        markers: ivs.len() <= 40 && n <= NAMED_STREAMS,
    };
    rate_panel(&top, &time, n, lab_rate_bps)?;
    if doc.start.udp {
        udp_panel(&mid, &time)?;
    } else {
        rtt_panel(&mid, &time)?;
    }
    fairness_panel(&bottom, &time)
}

/// Panel 1's axes: each stream's rate on the left, the sum (and a lab's bottleneck) on
/// the right.
type RateChart<'a, 'b> = DualCoordChartContext<
    'a,
    SVGBackend<'b>,
    Cartesian2d<RangedCoordf64, RangedCoordf64>,
    Cartesian2d<RangedCoordf64, RangedCoordf64>,
>;

/// Panel 1, drawn one layer at a time, each adding its legend entries: the wide ones
/// (`entries`) and, past [`NAMED_STREAMS`], the streams' ids in a grid (`ids`).
struct RatePanel<'a, 'b, 'd> {
    chart: RateChart<'a, 'b>,
    time: &'d Timeline<'d>,
    /// The fastest stream's rate, b/s, and the left axis's divisor.
    max_stream: f64,
    stream_div: f64,
    /// The right axis's divisor.
    sum_div: f64,
    entries: Vec<Entry>,
    ids: Vec<Entry>,
}

/// Each stream's receiver rate, the sum on the right axis.
fn rate_panel(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    time: &Timeline<'_>,
    n: usize,
    lab_rate_bps: Option<u64>,
) -> Drawn {
    let (chart_area, legend_area) = area.split_horizontally(900);
    let mut panel = RatePanel::new(&chart_area, time, n, lab_rate_bps)?;
    panel.left_out_bands()?;
    panel.streams(n)?;
    panel.sum()?;
    if let Some(rate) = lab_rate_bps {
        panel.bottleneck(rate)?;
    }
    panel.starved()?;
    if n > NAMED_STREAMS {
        panel.entries.push(entry(
            format!("{n} streams, by id:"),
            WHITE.to_rgba(),
            Mark::Line(0),
        ));
    }
    legend(&legend_area, &panel.entries, &panel.ids)
}

impl<'a, 'b, 'd> RatePanel<'a, 'b, 'd> {
    /// The axes, scaled to the fastest stream and the largest sum (or the bottleneck).
    fn new(
        chart_area: &'a DrawingArea<SVGBackend<'b>, Shift>,
        time: &'d Timeline<'d>,
        n: usize,
        lab_rate_bps: Option<u64>,
    ) -> std::result::Result<Self, Box<dyn StdError>> {
        let ivs = time.ivs;
        let max_stream = ivs
            .iter()
            .flat_map(|iv| iv.streams.iter().map(|s| s.bits_per_second))
            .fold(0.0, f64::max);
        let max_sum = ivs
            .iter()
            .map(|iv| iv.sum.bits_per_second)
            .chain(lab_rate_bps.map(|r| r as f64))
            .fold(0.0, f64::max);
        let (sdiv, sunit) = rate_unit(max_stream);
        let (tdiv, tunit) = rate_unit(max_sum);
        let t_end = time.t_end;
        let mut chart = time_chart(
            chart_area,
            format!("Receiver rate per stream ({n} streams) and their sum"),
        )
        .build_cartesian_2d(0.0..t_end, 0.0..(max_stream / sdiv * 1.1).max(1e-3))?
        .set_secondary_coord(0.0..t_end, 0.0..(max_sum / tdiv * 1.1).max(1e-3));
        chart
            .configure_mesh()
            .x_desc("time, s")
            .y_desc(format!("per stream, {sunit}"))
            .light_line_style(WHITE.mix(0.0))
            .draw()?;
        chart
            .configure_secondary_axes()
            .y_desc(format!("sum, {tunit}"))
            .draw()?;
        Ok(RatePanel {
            chart,
            time,
            max_stream,
            stream_div: sdiv,
            sum_div: tdiv,
            entries: Vec::new(),
            ids: Vec::new(),
        })
    }

    /// Rows left out of the totals, as bands: -O's, and a cut-short test's past the
    /// sender's last report.
    fn left_out_bands(&mut self) -> Drawn {
        let bands = [
            (
                LeftOut::Omitted,
                "omitted (-O)",
                RGBColor(225, 225, 225).to_rgba(),
            ),
            (
                LeftOut::Uncounted,
                "cut short: not in totals",
                RGBColor(250, 215, 180).to_rgba(),
            ),
        ];
        let band_top = self.max_stream / self.stream_div * 1.1;
        for (why, label, colour) in bands {
            let marked: Vec<_> = (self.time.ivs.iter())
                .filter(|iv| iv.left_out() == Some(why))
                .collect();
            if marked.is_empty() {
                continue;
            }
            self.chart.draw_series(marked.iter().map(|iv| {
                Rectangle::new(
                    [(iv.sum.start, 0.0), (iv.sum.end, band_top)],
                    colour.filled(),
                )
            }))?;
            self.entries.push(entry(label, colour, Mark::Band));
        }
        Ok(())
    }

    /// One line per stream; named in the legend up to [`NAMED_STREAMS`], else by id.
    fn streams(&mut self, n: usize) -> Drawn {
        for s in 0..n {
            let c = match n {
                0..=NAMED_STREAMS => colour(s, n),
                _ => colour(s, n).mix(0.75),
            };
            let points: Vec<(f64, f64)> = (self.time.ivs.iter())
                .filter_map(|iv| iv.streams.get(s))
                .map(|r| (mid_t(r.start, r.end), r.bits_per_second / self.stream_div))
                .collect();
            draw_line(&mut self.chart, &points, (c, 1), self.time.markers)?;
            if n <= NAMED_STREAMS {
                self.entries
                    .push(entry(format!("stream {s}"), c, Mark::Line(2)));
            } else {
                self.ids.push(entry(format!("{s}"), c, Mark::Line(2)));
            }
        }
        Ok(())
    }

    /// The sum, thick and black on the right axis; first in the legend.
    fn sum(&mut self) -> Drawn {
        let sum_points: Vec<(f64, f64)> = (self.time.ivs.iter())
            .map(|iv| {
                (
                    mid_t(iv.sum.start, iv.sum.end),
                    iv.sum.bits_per_second / self.sum_div,
                )
            })
            .collect();
        let black = BLACK.to_rgba();
        self.chart
            .draw_secondary_series(LineSeries::new(sum_points.clone(), black.stroke_width(3)))?;
        if self.time.markers {
            self.chart.draw_secondary_series(
                sum_points
                    .iter()
                    .map(|&p| Circle::new(p, 3, black.filled())),
            )?;
        }
        self.entries
            .insert(0, entry("sum (right axis)", black, Mark::Line(3)));
        Ok(())
    }

    /// A lab's link rate, dashed on the right axis; second in the legend.
    fn bottleneck(&mut self, rate_bps: u64) -> Drawn {
        let red = RGBColor(200, 0, 0).to_rgba();
        let y = rate_bps as f64 / self.sum_div;
        self.chart.draw_secondary_series(DashedLineSeries::new(
            [(0.0, y), (self.time.t_end, y)],
            8,
            5,
            red.stroke_width(2),
        ))?;
        self.entries
            .insert(1, entry("lab bottleneck", red, Mark::Dashed));
        Ok(())
    }

    /// A stream that read nothing while others read: a red cross on the axis.
    fn starved(&mut self) -> Drawn {
        let starved: Vec<(f64, f64)> = (self.time.ivs.iter())
            .filter(|iv| iv.sum.bytes > 0)
            .flat_map(|iv| {
                iv.streams
                    .iter()
                    .filter(|r| r.bytes == 0)
                    .map(|r| (mid_t(r.start, r.end), 0.0))
            })
            .collect();
        if starved.is_empty() {
            return Ok(());
        }
        let red = RED.to_rgba();
        self.chart.draw_series(
            starved
                .iter()
                .map(|&p| Cross::new(p, 5, red.stroke_width(2))),
        )?;
        self.entries.push(entry(
            format!("starved ({})", starved.len()),
            red,
            Mark::Cross,
        ));
        Ok(())
    }
}

/// A log axis's ticks from `lo` to `hi`: 1, 2 and 5 of each decade it spans (every
/// digit when that gives fewer than four), so a range within one decade still has labels.
fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let ticks = |digits: &[f64]| -> Vec<f64> {
        let first = lo.log10().floor() as i32;
        let last = hi.log10().ceil() as i32;
        (first..=last)
            .flat_map(|e| digits.iter().map(move |d| d * 10f64.powi(e)))
            .filter(|v| (lo..=hi).contains(v))
            .collect()
    };
    let coarse = ticks(&[1.0, 2.0, 5.0]);
    match coarse.len() {
        0..4 => ticks(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]),
        _ => coarse,
    }
}

/// A tick's label: as many decimals as a value under 1 needs, none from 1 up.
fn tick_text(v: f64) -> String {
    if v >= 1.0 {
        format!("{v:.0}")
    } else {
        let decimals = (-v.log10()).ceil() as usize;
        format!("{v:.decimals$}")
    }
}

/// One line of the RTT panel: its label, colour, width and points (ms).
type RttSeries = (&'static str, RGBAColor, u32, Vec<(f64, f64)>);

/// The RTT panel's lines: block RTT (max and average), kernel srtt and the path's
/// min_rtt, each from the rows that have it.
fn rtt_series(ivs: &[IntervalReport]) -> Vec<RttSeries> {
    let ms = |us: f64| us / 1e3;
    let pick = |f: &dyn Fn(&SumRow) -> Option<f64>| -> Vec<(f64, f64)> {
        ivs.iter()
            .filter_map(|iv| {
                f(&iv.sum)
                    .filter(|v| *v > 0.0)
                    .map(|v| (mid_t(iv.sum.start, iv.sum.end), ms(v)))
            })
            .collect()
    };
    vec![
        (
            "block RTT max",
            colour(1, 4),
            1,
            pick(&|s| s.block_rtt.map(|r| r.max_us)),
        ),
        (
            "block RTT avg",
            colour(0, 4),
            2,
            pick(&|s| s.block_rtt.map(|r| r.avg_us)),
        ),
        (
            "kernel srtt avg",
            colour(2, 4),
            2,
            pick(&|s| s.kernel_rtt.map(|r| r.avg_us)),
        ),
        (
            "path (min_rtt)",
            colour(3, 4),
            1,
            pick(&|s| s.min_rtt.map(f64::from)),
        ),
    ]
}

/// Block RTT and kernel RTT per interval (log scale: they can be orders of magnitude
/// apart).
fn rtt_panel(mid: &DrawingArea<SVGBackend<'_>, Shift>, time: &Timeline<'_>) -> Drawn {
    let (chart_area, legend_area) = mid.split_horizontally(900);
    let rtts = rtt_series(time.ivs);
    let all = rtts.iter().flat_map(|s| s.3.iter().map(|p| p.1));
    let (lo, hi) = all.fold((f64::MAX, 0.0f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
    let (lo, hi) = if hi > 0.0 {
        (lo * 0.7, hi * 1.5)
    } else {
        (0.001, 1.0)
    };
    let mut chart = time_chart(
        &chart_area,
        "RTT: block (every queue a block met) and kernel (the path)",
    )
    .build_cartesian_2d(
        0.0..time.t_end,
        (lo..hi).log_scale().with_key_points(log_ticks(lo, hi)),
    )?;
    chart
        .configure_mesh()
        .x_desc("time, s")
        .y_desc("ms (log scale)")
        .y_label_formatter(&|v| tick_text(*v))
        .light_line_style(WHITE.mix(0.0))
        .draw()?;
    let mut entries = Vec::new();
    for (label, c, width, points) in rtts {
        if points.is_empty() {
            continue;
        }
        draw_line(&mut chart, &points, (c, width), time.markers)?;
        entries.push(entry(label, c, Mark::Line(width)));
    }
    if entries.is_empty() {
        entries.push(entry("no RTT samples", BLACK.to_rgba(), Mark::Line(0)));
    }
    legend(&legend_area, &entries, &[])
}

/// `-u`: the datagrams lost per interval, % (left axis), and the receivers' RFC 3550
/// jitter, ms (right axis): what a UDP test is read for.
fn udp_panel(mid: &DrawingArea<SVGBackend<'_>, Shift>, time: &Timeline<'_>) -> Drawn {
    let (t_end, markers) = (time.t_end, time.markers);
    let pick = |f: fn(&UdpFigures) -> f64| -> Vec<(f64, f64)> {
        (time.ivs.iter())
            .filter_map(|iv| {
                iv.sum
                    .udp
                    .as_ref()
                    .map(|u| (mid_t(iv.sum.start, iv.sum.end), f(u)))
            })
            .collect()
    };
    let loss = pick(|u| u.lost_percent);
    let jitter = pick(|u| u.jitter_ms);
    let top = |p: &[(f64, f64)], floor: f64| p.iter().map(|q| q.1).fold(floor, f64::max) * 1.1;
    let (chart_area, legend_area) = mid.split_horizontally(900);
    let mut chart = time_chart(
        &chart_area,
        "UDP: datagrams lost per interval and jitter (RFC 3550)",
    )
    .build_cartesian_2d(0.0..t_end, 0.0..top(&loss, 1.0))?
    .set_secondary_coord(0.0..t_end, 0.0..top(&jitter, 0.01));
    chart
        .configure_mesh()
        .x_desc("time, s")
        .y_desc("lost, %")
        .light_line_style(WHITE.mix(0.0))
        .draw()?;
    chart
        .configure_secondary_axes()
        .y_desc("jitter, ms")
        .draw()?;
    let (red, blue) = (colour(0, 4), colour(2, 4));
    chart.draw_series(LineSeries::new(loss.clone(), red.stroke_width(2)))?;
    chart.draw_secondary_series(LineSeries::new(jitter.clone(), blue.stroke_width(2)))?;
    if markers {
        chart.draw_series(loss.iter().map(|&p| Circle::new(p, 2, red.filled())))?;
        chart.draw_secondary_series(jitter.iter().map(|&p| Circle::new(p, 2, blue.filled())))?;
    }
    let entries = [
        entry("lost % (left axis)", red, Mark::Line(2)),
        entry("jitter ms (right axis)", blue, Mark::Line(2)),
    ];
    legend(&legend_area, &entries, &[])
}

/// Jain's index per interval; intervals with a starved stream marked.
fn fairness_panel(bottom: &DrawingArea<SVGBackend<'_>, Shift>, time: &Timeline<'_>) -> Drawn {
    let ivs = time.ivs;
    let (chart_area, legend_area) = bottom.split_horizontally(900);
    let mut chart = time_chart(
        &chart_area,
        "Fairness per interval (Jain's index: 1 = equal shares)",
    )
    .build_cartesian_2d(0.0..time.t_end, 0.0..1.05)?;
    chart
        .configure_mesh()
        .x_desc("time, s")
        .y_desc("Jain's index")
        .light_line_style(WHITE.mix(0.0))
        .draw()?;
    let jain: Vec<(f64, f64)> = ivs
        .iter()
        .filter_map(|iv| {
            iv.sum
                .fairness
                .jain
                .map(|j| (mid_t(iv.sum.start, iv.sum.end), j))
        })
        .collect();
    let blue = colour(0, 1);
    draw_line(&mut chart, &jain, (blue, 2), time.markers)?;
    let mut entries = vec![entry("Jain's index", blue, Mark::Line(2))];
    let hungry: Vec<(f64, f64)> = ivs
        .iter()
        .filter(|iv| iv.sum.fairness.starved > 0 && iv.sum.bytes > 0)
        .map(|iv| {
            let j = iv.sum.fairness.jain.unwrap_or(0.0);
            (mid_t(iv.sum.start, iv.sum.end), j)
        })
        .collect();
    if !hungry.is_empty() {
        let red = RED.to_rgba();
        chart.draw_series(
            hungry
                .iter()
                .map(|&p| Cross::new(p, 5, red.stroke_width(2))),
        )?;
        entries.push(entry("a stream starved", red, Mark::Cross));
    }
    legend(&legend_area, &entries, &[])
}

/// The dimensions a comparison sweeps, in the order the x axis is chosen from.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Dim {
    Block,
    Streams,
    Window,
    Pin,
    Engine,
}

impl Dim {
    const ALL: [Dim; 5] = [Dim::Block, Dim::Streams, Dim::Window, Dim::Pin, Dim::Engine];

    fn name(self) -> &'static str {
        match self {
            Dim::Block => "block size",
            Dim::Streams => "streams",
            Dim::Window => "window",
            Dim::Pin => "pinning",
            Dim::Engine => "engine",
        }
    }

    /// The value's label, and a key that sorts it (sizes and counts by number).
    fn of(self, r: &CompareRow) -> (String, u64) {
        let p = &r.point;
        match self {
            Dim::Block => (format_size(p.block_bytes), p.block_bytes),
            Dim::Streams => (p.streams.to_string(), u64::from(p.streams)),
            Dim::Window => (
                p.window_bytes.map_or("auto".into(), format_size),
                p.window_bytes.unwrap_or(0),
            ),
            Dim::Pin => (p.pin.clone(), u64::from(p.pin != "auto")),
            Dim::Engine => (
                p.engine.to_string(),
                u64::from(p.engine.to_string() != "threads"),
            ),
        }
    }

    fn values(self, rows: &[CompareRow]) -> Vec<(String, u64)> {
        let mut v: Vec<(String, u64)> = rows.iter().map(|r| self.of(r)).collect();
        v.sort_by(|a, b| (a.1, &a.0).cmp(&(b.1, &b.0)));
        v.dedup();
        v
    }
}

/// A comparison's picture: Gbit/s and Gbit/s per busy core against the swept dimension.
pub(crate) fn compare_svg(doc: &CompareDoc, title: &str) -> Result<String> {
    let mut svg = String::new();
    draw_compare(&mut svg, doc, title).map_err(|e| Error::Test(format!("draw the plot: {e}")))?;
    Ok(svg)
}

/// A comparison's axes: the swept dimension along x, and one curve per combination of the
/// other swept dimensions, in the order the rows first show them.
struct CompareAxes {
    x_dim: Dim,
    xs: Vec<(String, u64)>,
    others: Vec<Dim>,
    curves: Vec<String>,
}

impl CompareAxes {
    fn of(rows: &[CompareRow]) -> CompareAxes {
        let varying: Vec<Dim> = Dim::ALL
            .into_iter()
            .filter(|d| d.values(rows).len() > 1)
            .collect();
        // The x axis: the first swept size or count, else the first swept choice.
        let x_dim = varying.first().copied().unwrap_or(Dim::Block);
        let others: Vec<Dim> = varying.iter().copied().filter(|d| *d != x_dim).collect();
        let mut axes = CompareAxes {
            x_dim,
            xs: x_dim.values(rows),
            others,
            curves: Vec::new(),
        };
        for r in rows {
            let c = axes.curve_of(r);
            if !axes.curves.contains(&c) {
                axes.curves.push(c);
            }
        }
        axes
    }

    /// The row's place along the x axis.
    fn x_of(&self, r: &CompareRow) -> usize {
        let x = self.x_dim.of(r);
        self.xs.iter().position(|v| *v == x).unwrap_or(0)
    }

    /// The name of the row's curve: its values of the other swept dimensions.
    fn curve_of(&self, r: &CompareRow) -> String {
        let parts: Vec<String> = (self.others.iter())
            .map(|d| format!("{} {}", d.name(), d.of(r).0))
            .collect();
        match parts.is_empty() {
            true => "pinperf".into(),
            false => parts.join(", "),
        }
    }
}

/// What a comparison's panel draws of each row (none: the run has no value).
type Metric = fn(&CompareRow) -> Option<f64>;

fn draw_compare(svg: &mut String, doc: &CompareDoc, title: &str) -> Drawn {
    let axes = CompareAxes::of(&doc.rows);
    let legend_w = 260;
    let root = SVGBackend::with_string(svg, (820 + legend_w, 760)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(title, (FONT, 20))?;
    let (top, bottom) = root.split_vertically(360);
    let panels: [(&DrawingArea<SVGBackend<'_>, Shift>, &str, &str, Metric); 2] = [
        (&top, "Throughput (receiver)", "Gbit/s", |r| {
            r.bits_per_second.map(|b| b / 1e9)
        }),
        (&bottom, "CPU efficiency", "Gbit/s per busy core", |r| {
            r.gbps_per_busy_core
        }),
    ];
    for (area, caption, unit, metric) in panels {
        compare_panel(area, &axes, &doc.rows, (caption, unit), metric)?;
    }
    root.present()?;
    Ok(())
}

/// One metric of every row against the x axis, a curve per combination; the legend
/// counts the rows without a value.
fn compare_panel(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    axes: &CompareAxes,
    rows: &[CompareRow],
    (caption, unit): (&str, &str),
    metric: Metric,
) -> Drawn {
    let (x_dim, xs) = (axes.x_dim, &axes.xs);
    let (chart_area, legend_area) = area.split_horizontally(820);
    let max = rows.iter().filter_map(metric).fold(0.0, f64::max).max(1e-3);
    let mut chart = ChartBuilder::on(&chart_area)
        .caption(format!("{caption} against {}", x_dim.name()), (FONT, 16))
        .margin(8)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(
            (0..xs.len().saturating_sub(1)).into_segmented(),
            0.0..max * 1.15,
        )?;
    chart
        .configure_mesh()
        .x_desc(x_dim.name())
        .y_desc(unit)
        .x_labels(xs.len() + 1)
        .x_label_formatter(&|v| match v {
            SegmentValue::CenterOf(i) => xs.get(*i).map_or(String::new(), |x| x.0.clone()),
            _ => String::new(),
        })
        .light_line_style(WHITE.mix(0.0))
        .draw()?;
    let mut entries = Vec::new();
    for (k, name) in axes.curves.iter().enumerate() {
        let c = colour(k, axes.curves.len());
        let mut points: Vec<(usize, f64)> = rows
            .iter()
            .filter(|r| axes.curve_of(r) == *name)
            .filter_map(|r| metric(r).map(|v| (axes.x_of(r), v)))
            .collect();
        points.sort_by_key(|p| p.0);
        let points: Vec<(SegmentValue<usize>, f64)> = points
            .into_iter()
            .map(|(i, v)| (SegmentValue::CenterOf(i), v))
            .collect();
        chart.draw_series(LineSeries::new(points.clone(), c.stroke_width(2)))?;
        chart.draw_series(points.into_iter().map(|p| Circle::new(p, 3, c.filled())))?;
        entries.push(entry(name.clone(), c, Mark::Line(2)));
    }
    let failed = rows.iter().filter(|r| metric(r).is_none()).count();
    if failed > 0 {
        entries.push(entry(
            format!("{failed} run(s) without a value"),
            RED.to_rgba(),
            Mark::Cross,
        ));
    }
    legend(&legend_area, &entries, &[])
}

/// The bytes of `svg` as `path`'s extension asks: as it is for `.svg`, rasterised for `.png`.
pub(crate) fn encode(path: &Path, flag: &str, svg: &str) -> Result<Vec<u8>> {
    Ok(match picture_kind(path, flag)? {
        Picture::Svg => svg.as_bytes().to_vec(),
        Picture::Png => {
            to_png(svg).map_err(|e| Error::Test(format!("render the plot as PNG: {e}")))?
        }
    })
}

/// What a plot file's extension asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Picture {
    Svg,
    Png,
}

/// `.svg` or `.png`, else a usage error naming the flag and the file.
pub(crate) fn picture_kind(path: &Path, flag: &str) -> Result<Picture> {
    match path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_lowercase)
        .as_deref()
    {
        Some("svg") => Ok(Picture::Svg),
        Some("png") => Ok(Picture::Png),
        _ => Err(Error::Usage(format!(
            "{flag} {}: a plot is written as .svg or .png",
            path.display()
        ))),
    }
}

/// Rasterises an SVG with resvg (pure Rust: no system libraries). Text uses the system's
/// fonts (read from the usual directories); a host without any gets the lines only.
fn to_png(svg: &str) -> std::result::Result<Vec<u8>, String> {
    use resvg::{tiny_skia, usvg};
    let mut opt = usvg::Options::default();
    let db = opt.fontdb_mut();
    db.load_system_fonts();
    let sans = [
        "DejaVu Sans",
        "Liberation Sans",
        "Noto Sans",
        "FreeSans",
        "Arial",
    ]
    .into_iter()
    .find(|name| {
        db.faces()
            .any(|f| f.families.iter().any(|(family, _)| family == name))
    });
    if let Some(name) = sans {
        db.set_sans_serif_family(name);
    }
    let tree = usvg::Tree::from_str(svg, &opt).map_err(|e| e.to_string())?;
    let size = tree.size().to_int_size();
    let mut pixmap = tiny_skia::Pixmap::new(size.width(), size.height())
        .ok_or_else(|| "an empty picture".to_string())?;
    resvg::render(&tree, tiny_skia::Transform::default(), &mut pixmap.as_mut());
    pixmap.encode_png().map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::model::sample;

    /// A 60 ms path's RTTs (42 to 150 ms) get ticks inside the decade, not only "100".
    #[test]
    fn a_log_axis_within_one_decade_still_has_ticks() {
        assert_eq!(
            log_ticks(42.0, 150.0),
            [50.0, 60.0, 70.0, 80.0, 90.0, 100.0]
        );
        assert_eq!(
            log_ticks(0.03, 90.0),
            [0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0]
        );
        assert_eq!(tick_text(0.05), "0.05");
        assert_eq!(tick_text(60.0), "60");
    }

    /// A cut-short test's rows past the sender's last report are banded and named, as
    /// `-O`'s are: they are not in the totals (nothing marked them).
    #[test]
    fn rows_left_out_of_the_totals_are_banded_and_named() {
        let mut doc = Document::new(None, sample::header());
        for (index, uncounted) in [(0, false), (1, false), (2, true)] {
            let mut iv = sample::interval();
            iv.index = index;
            iv.uncounted = uncounted;
            doc.intervals.push(iv);
        }
        let label = "cut short: not in totals";
        let svg = test_svg(&doc, None, "t").unwrap();
        assert!(svg.contains(label), "{svg}");
        doc.intervals[2].uncounted = false;
        let svg = test_svg(&doc, None, "t").unwrap();
        assert!(!svg.contains(label), "{svg}");
    }
}
