//! Data files: `data.json` (the whole run, reads back with [`from_json`]) and `data.csv` (one row per
//! point, for spreadsheets and pandas).

use crate::model::{BenchData, Measurement};

/// The CSV columns, in order.
pub const CSV_HEADER: [&str; 24] = [
    "op",
    "mode",
    "label",
    "world",
    "bytes",
    "dtype",
    "iterations",
    "trials",
    "median_us",
    "min_us",
    "max_us",
    "algbw_gbps",
    "busbw_gbps",
    "host_cpu_us_per_op",
    "sms_used",
    "queue_depth",
    "graph",
    "intra_gpu",
    "isolated_median_us",
    "isolated_min_us",
    "isolated_max_us",
    "sm_active_pct",
    "nvlink_tx_gbps",
    "nvlink_rx_gbps",
];

/// The run as pretty-printed JSON.
pub fn to_json(data: &BenchData) -> Result<String, serde_json::Error> {
    serde_json::to_string_pretty(data)
}

/// A run read back from [`to_json`]'s output.
pub fn from_json(text: &str) -> Result<BenchData, serde_json::Error> {
    serde_json::from_str(text)
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
}

/// A point's fields, in [`CSV_HEADER`]'s order: numbers at full precision, unknowns empty.
pub fn csv_fields(m: &Measurement) -> [String; CSV_HEADER.len()] {
    [
        m.op.name().to_owned(),
        m.mode.name().to_owned(),
        m.label.clone().unwrap_or_default(),
        m.world.to_string(),
        m.bytes.to_string(),
        m.dtype.name().to_owned(),
        m.iterations.to_string(),
        m.trials.to_string(),
        m.median_us.to_string(),
        m.min_us.to_string(),
        m.max_us.to_string(),
        m.algbw_gbps.to_string(),
        m.busbw_gbps.to_string(),
        opt(m.host_cpu_us_per_op),
        opt(m.sms_used),
        opt(m.queue_depth),
        m.graph.to_string(),
        m.intra_gpu.to_string(),
        opt(m.isolated.map(|i| i.median_us)),
        opt(m.isolated.map(|i| i.min_us)),
        opt(m.isolated.map(|i| i.max_us)),
        opt(m.utilization.as_ref().and_then(|u| u.sm_activity_pct)),
        opt(m.utilization.as_ref().and_then(|u| u.nvlink_tx_gbps())),
        opt(m.utilization.as_ref().and_then(|u| u.nvlink_rx_gbps())),
    ]
}

/// The points as CSV (RFC 4180, the `csv` crate's quoting): the header, then one line per point in the
/// data's order.
pub fn to_csv(data: &BenchData) -> String {
    let mut out = csv::WriterBuilder::new().terminator(csv::Terminator::Any(b'\n')).from_writer(Vec::new());
    // Writing into a Vec cannot fail: the writer's only errors are its sink's.
    out.write_record(CSV_HEADER).expect("writing CSV into memory");
    for m in &data.measurements {
        out.write_record(csv_fields(m)).expect("writing CSV into memory");
    }
    let bytes = out.into_inner().expect("flushing CSV into memory");
    String::from_utf8(bytes).expect("CSV of UTF-8 fields is UTF-8")
}
