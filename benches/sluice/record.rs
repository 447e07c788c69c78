//! The harness's figures as data: with `--json FILE`, the figures the
//! book's charts show are written to FILE when the run ends, with the
//! machine, the date and the options of the run. `scripts/charts` renders
//! the charts from such a file.
//!
//! A figure is one bar of one chart: `chart` names the chart, `group` the
//! cluster of bars it stands in (a broker, a language, a load), `series`
//! the bar within it (a mode, a percentile), and `value` its height in
//! `unit`.

use std::path::Path;
use std::sync::Mutex;

use serde_json::{Value, json};

struct Figure {
    chart: &'static str,
    group: String,
    series: String,
    unit: &'static str,
    value: f64,
}

static FIGURES: Mutex<Vec<Figure>> = Mutex::new(Vec::new());

/// Note one figure of `chart` (see the module's documentation).
pub fn figure(chart: &'static str, group: &str, series: &str, unit: &'static str, value: f64) {
    FIGURES.lock().unwrap().push(Figure {
        chart,
        group: group.to_string(),
        series: series.to_string(),
        unit,
        value,
    });
}

/// Write every figure noted so far to `path` as JSON, with the machine
/// this ran on, today's date, `options` (the harness's arguments) and the
/// `SLUICE_BENCH_*` variables set.
pub fn write(path: &Path, options: &[String]) {
    let figures: Vec<Value> = FIGURES
        .lock()
        .unwrap()
        .iter()
        .map(|f| {
            json!({
                "chart": f.chart,
                "group": f.group,
                "series": f.series,
                "unit": f.unit,
                "value": (f.value * 100.0).round() / 100.0,
            })
        })
        .collect();
    // The harness's environment variables change what runs (see the book's
    // Benchmarks page); those set are part of the run's description.
    let env: serde_json::Map<String, Value> = std::env::vars()
        .filter(|(k, _)| k.starts_with("SLUICE_BENCH_"))
        .map(|(k, v)| (k, Value::String(v)))
        .collect();
    let doc = json!({
        "machine": machine(),
        "date": today(),
        "options": options,
        "environment": env,
        "figures": figures,
    });
    let text = serde_json::to_string_pretty(&doc).unwrap() + "\n";
    std::fs::write(path, text)
        .unwrap_or_else(|e| panic!("writing the figures to {}: {e}", path.display()));
    println!("figures: {}", path.display());
}

/// The CPU model, its count and the memory, as `/proc` gives them.
fn machine() -> Value {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, m)| m.trim().to_string())
        .unwrap_or_else(|| "unknown".into());
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem_kib: f64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0.0);
    json!({
        "cpu": model,
        "cpus": std::thread::available_parallelism().map_or(0, |n| n.get()),
        "memory_gib": (mem_kib / 1024.0 / 1024.0).round(),
        "os": std::env::consts::OS,
    })
}

/// Today's date (UTC), as YYYY-MM-DD.
fn today() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    chrono::DateTime::from_timestamp(secs as i64, 0)
        .expect("the clock is within chrono's range")
        .format("%Y-%m-%d")
        .to_string()
}
