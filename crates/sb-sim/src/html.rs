//! A self-contained HTML page: the tables, and plots drawn as inline SVG (no scripts, no
//! external assets), so it opens anywhere and can be attached to an issue.

use std::fmt::Write as _;

use crate::observer::{LogHistogram, Outcome};
use crate::report::{EngineReport, Report};

const ENGINE_COLORS: [&str; 3] = ["#1b7837", "#b2182b", "#2166ac"];
const OUTCOME_COLORS: [&str; 4] = ["#d6604d", "#4393c3", "#92c5de", "#a6dba0"];
const W: f64 = 560.0;
const H: f64 = 220.0;
const PAD: f64 = 44.0;

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn fmt_duration_label(i: usize) -> String {
    let ns = LogHistogram::lower_bound(i).as_nanos() as f64;
    match ns {
        n if n < 1e3 => format!("{n:.0}ns"),
        n if n < 1e6 => format!("{:.0}µs", n / 1e3),
        n if n < 1e9 => format!("{:.0}ms", n / 1e6),
        n => format!("{:.1}s", n / 1e9),
    }
}

/// Distribution curves over the log-duration buckets, each normalized to its own total.
fn distribution_chart(title: &str, series: &[(String, &str, &[u64])]) -> String {
    let lo = series
        .iter()
        .filter_map(|(_, _, c)| c.iter().position(|&n| n > 0))
        .min()
        .unwrap_or(0);
    let hi = series
        .iter()
        .filter_map(|(_, _, c)| c.iter().rposition(|&n| n > 0))
        .max()
        .unwrap_or(lo + 1)
        .max(lo + 1);
    let share = |c: &[u64], i: usize| {
        let total: u64 = c.iter().sum();
        if total == 0 {
            0.0
        } else {
            c[i] as f64 / total as f64
        }
    };
    let ymax = series
        .iter()
        .flat_map(|(_, _, c)| (lo..=hi).map(move |i| share(c, i)))
        .fold(0.0f64, f64::max)
        .max(1e-9);
    let x = |i: usize| PAD + (i - lo) as f64 / (hi - lo) as f64 * (W - 2.0 * PAD);
    let y = |v: f64| H - PAD + 10.0 - v / ymax * (H - PAD - 20.0);
    let mut svg = format!(
        r#"<svg viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img"><title>{}</title>"#,
        escape(title)
    );
    let _ = write!(
        svg,
        r##"<line x1="{PAD}" y1="{y0}" x2="{x1}" y2="{y0}" stroke="#999"/>"##,
        y0 = y(0.0),
        x1 = W - PAD
    );
    for i in (lo..=hi).step_by(((hi - lo) / 6).max(1)) {
        let _ = write!(
            svg,
            r##"<text x="{}" y="{}" font-size="10" text-anchor="middle" fill="#555">{}</text>"##,
            x(i),
            H - 8.0,
            fmt_duration_label(i)
        );
    }
    for (k, (name, color, counts)) in series.iter().enumerate() {
        let points: Vec<String> = (lo..=hi)
            .map(|i| format!("{:.1},{:.1}", x(i), y(share(counts, i))))
            .collect();
        let _ = write!(
            svg,
            r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/>"#,
            points.join(" ")
        );
        let _ = write!(
            svg,
            r#"<text x="{}" y="{}" font-size="11" fill="{color}">{}</text>"#,
            W - PAD - 150.0,
            16.0 + 14.0 * k as f64,
            escape(name)
        );
    }
    svg.push_str("</svg>");
    svg
}

/// Outcome shares per timeline step, as stacked columns.
fn timeline_chart(e: &EngineReport) -> String {
    let n = e.timeline.len().max(1);
    let bw = (W - 2.0 * PAD) / n as f64;
    let mut svg = format!(
        r#"<svg viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img"><title>outcome shares over time, {}</title>"#,
        e.engine
    );
    for (t, row) in e.timeline.iter().enumerate() {
        let total: u64 = row.iter().sum();
        if total == 0 {
            continue;
        }
        let mut top = H - PAD;
        for (i, &count) in row.iter().enumerate() {
            let h = count as f64 / total as f64 * (H - PAD - 20.0);
            top -= h;
            let _ = write!(
                svg,
                r#"<rect x="{:.1}" y="{top:.1}" width="{:.1}" height="{h:.1}" fill="{}"/>"#,
                PAD + t as f64 * bw,
                bw.max(1.0),
                OUTCOME_COLORS[i]
            );
        }
    }
    let secs = n as f64 * e.timeline_step_ms as f64 / 1e3;
    let _ = write!(
        svg,
        r##"<text x="{PAD}" y="{}" font-size="10" fill="#555">0 s</text><text x="{}" y="{}" font-size="10" fill="#555" text-anchor="end">{secs:.1} s</text>"##,
        H - 8.0,
        W - PAD,
        H - 8.0
    );
    for (i, outcome) in Outcome::ALL.iter().map(|o| o.label()).enumerate() {
        let _ = write!(
            svg,
            r#"<rect x="{}" y="6" width="10" height="10" fill="{}"/><text x="{}" y="15" font-size="11">{outcome}</text>"#,
            PAD + i as f64 * 120.0,
            OUTCOME_COLORS[i],
            PAD + 14.0 + i as f64 * 120.0
        );
    }
    svg.push_str("</svg>");
    svg
}

/// The page.
pub fn render(report: &Report) -> String {
    let mut html = String::from(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>sb-sim report</title><style>\
         body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;color:#222}\
         table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{padding:.25em .7em;border-bottom:1px solid #ddd;text-align:right}\
         th:first-child,td:first-child{text-align:left}.grid{display:flex;flex-wrap:wrap;gap:1em}figure{margin:0}\
         figcaption{font-size:.9em;color:#555}pre{background:#f6f6f6;padding:1em;overflow:auto}</style></head><body>",
    );
    let _ = write!(
        html,
        "<h1>sb-sim report</h1><p>{}<br>{}</p>",
        escape(&report.workload),
        escape(&report.machine)
    );
    latency_section(&mut html, report);
    build_duration_section(&mut html, report);
    html.push_str("<h2>Outcome shares over time</h2><div class=\"grid\">");
    for e in &report.engines {
        let _ = write!(
            html,
            "<figure>{}<figcaption>{}</figcaption></figure>",
            timeline_chart(e),
            e.engine
        );
    }
    html.push_str("</div>");
    tables_section(&mut html, report);
    let _ = write!(
        html,
        "<h2>Text report</h2><pre>{}</pre></body></html>",
        escape(&report.to_text())
    );
    html
}

/// The drives' latency distribution, per engine.
fn latency_section(html: &mut String, report: &Report) {
    let latency: Vec<(String, &str, &[u64])> = report
        .engines
        .iter()
        .enumerate()
        .map(|(k, e)| {
            (
                format!("{} (p99 {:.2} ms)", e.engine, e.drives.tip_to_served.p99_ms),
                ENGINE_COLORS[k % 3],
                e.drives.latency_buckets.as_slice(),
            )
        })
        .collect();
    html.push_str("<h2>Tip entered the WAL → drive served</h2><figure>");
    html.push_str(&distribution_chart("drive latency", &latency));
    html.push_str("<figcaption>Share of served drives per latency bucket (log scale), per engine.</figcaption></figure>");
}

/// Each build outcome's duration distribution, per engine.
fn build_duration_section(html: &mut String, report: &Report) {
    html.push_str("<h2>Build duration per outcome</h2><div class=\"grid\">");
    for (i, outcome) in Outcome::ALL.iter().map(|o| o.label()).enumerate() {
        let series: Vec<(String, &str, &[u64])> = report
            .engines
            .iter()
            .enumerate()
            .map(|(k, e)| {
                (
                    e.engine.to_string(),
                    ENGINE_COLORS[k % 3],
                    e.build_duration_buckets[i].as_slice(),
                )
            })
            .collect();
        let _ = write!(
            html,
            "<figure>{}<figcaption>{outcome}</figcaption></figure>",
            distribution_chart(outcome, &series)
        );
    }
    html.push_str("</div>");
}

/// The production note's table of each engine.
fn tables_section(html: &mut String, report: &Report) {
    html.push_str("<h2>Tables</h2>");
    for e in &report.engines {
        let _ = write!(
            html,
            "<h3>{}</h3><table><tr><th>outcome</th><th>builds</th><th>share</th><th>mean build</th><th>mean lock wait</th><th>mean work</th><th>wait share</th></tr>",
            e.engine
        );
        for r in &e.rows {
            let _ = write!(
                html,
                "<tr><td>{}</td><td>{}</td><td>{:.1}%</td><td>{:.1} µs</td><td>{:.1} µs</td><td>{:.1} µs</td><td>{:.1}%</td></tr>",
                r.outcome,
                r.builds,
                r.share_pct,
                r.mean_build_us,
                r.mean_lock_wait_us,
                r.mean_work_us,
                r.wait_share_pct
            );
        }
        html.push_str("</table>");
    }
}
