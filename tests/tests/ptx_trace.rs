//! Trace mode costs nothing when off: the hot path's PTX is pinned whole, and no untraced module holds any
//! trace code; the traced flavour (`--cfg ferrocomm_trace`, built for one architecture) does record.
//!
//! The pinned entries' text lives in `tests/golden-kernels/hot-path.sm_90.ptx`, every instruction of each
//! entry with virtual registers, labels and symbol hashes numbered away (what changes with unrelated edits
//! elsewhere); a changed instruction, operand or immediate fails here. After an intended change of the hot
//! path, rewrite the file with `FERROCOMM_BLESS=1 cargo test -p ferrocomm-tests --test ptx_trace`.

use std::path::PathBuf;

use ferrocomm_golden_kernels::{PTX, TRACED_PTX};

/// The hot path: waits, signal raises, a block's put with signal, a pad's epoch, the block barrier.
const HOT_ENTRIES: &[&str] = &[
    "golden_signal_wait_ge",
    "golden_signal_set_release",
    "golden_signal_add_release",
    "golden_put_signal_block",
    "golden_pad_epoch",
    "golden_sync_threads",
];

/// What only a traced module holds: the ring's global and the recording function.
const TRACE_MARKS: &[&str] = &["FERROCOMM_TRACE_RING", "record_into_ring"];

fn golden_file() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("golden-kernels/hot-path.sm_90.ptx")
}

fn module(list: &'static [(u32, &'static str)], cc: u32) -> &'static str {
    list.iter().find(|(c, _)| *c == cc).map(|(_, p)| *p).unwrap_or_else(|| panic!("no sm_{cc} module"))
}

fn entry<'a>(ptx: &'a str, name: &str) -> &'a str {
    let start = ptx.find(&format!(".entry {name}(")).unwrap_or_else(|| panic!("entry `{name}` is missing"));
    let end = ptx[start..].find("\n}\n").map(|e| start + e + 2).expect("the entry's end");
    &ptx[start..end]
}

/// Numbers away what moves with unrelated edits: `%rd12` → `%rd`, `$L__BB3_7` → `$L__BB`, the hashes of
/// mangled names (`17h0123456789abcdefE` → `17hE`), the crate disambiguators of v0-mangled names
/// (`Cs5SCntcnJ7Cn_16ferrocomm_device` → `Cs_16ferrocomm_device`: cargo derives them from the package's
/// path, so they differ between checkouts) and the hashes of anonymous globals (`anon_$_<hash>_$_12`).
fn normalize(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let rest = &text[i..];
        let skip_digits =
            |from: usize| from + rest[from..].bytes().take_while(|b| b.is_ascii_digit() || *b == b'_').count();
        if let Some(reg) = ["%rd", "%rs", "%r", "%p", "%fd", "%f"].iter().find(|r| rest.starts_with(**r)) {
            out.push_str(reg);
            i += skip_digits(reg.len());
        } else if rest.starts_with("$L__BB") {
            out.push_str("$L__BB");
            i += skip_digits(6);
        } else if rest.starts_with("17h") && rest.len() >= 20 && rest.as_bytes()[19] == b'E' {
            out.push_str("17hE");
            i += 20;
        } else if let Some(len) = crate_disambiguator(rest) {
            out.push_str("Cs_");
            i += len;
        } else if let Some(tail) = rest.strip_prefix("anon_$_") {
            let mut used = 7 + tail.bytes().take_while(u8::is_ascii_hexdigit).count();
            out.push_str("anon_$_");
            if rest[used..].starts_with("_$_") {
                out.push_str("_$_");
                used += 3 + rest[used + 3..].bytes().take_while(u8::is_ascii_digit).count();
            }
            i += used;
        } else {
            let c = rest.chars().next().expect("not at the end");
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

/// The length of a v0 crate disambiguator at the start of `text` — `Cs`, base-62 digits, `_`, followed by
/// the crate name's length — or `None`.
fn crate_disambiguator(text: &str) -> Option<usize> {
    let digits = text.strip_prefix("Cs")?.bytes().take_while(u8::is_ascii_alphanumeric).count();
    let after = 2 + digits;
    let follows_name = text.as_bytes().get(after + 1).is_some_and(u8::is_ascii_digit);
    (digits > 0 && text.as_bytes().get(after) == Some(&b'_') && follows_name).then_some(after + 1)
}

fn hot_path_text(ptx: &str) -> String {
    HOT_ENTRIES.iter().map(|name| normalize(entry(ptx, name))).collect::<Vec<_>>().join("\n")
}

#[test]
fn the_untraced_hot_path_is_pinned_whole() {
    let text = hot_path_text(module(PTX, 90));
    if std::env::var_os("FERROCOMM_BLESS").is_some() {
        std::fs::write(golden_file(), &text).unwrap();
        return;
    }
    let golden = std::fs::read_to_string(golden_file()).expect("the hot-path golden file");
    if text != golden {
        let first = text.lines().zip(golden.lines()).position(|(a, b)| a != b).unwrap_or(0);
        panic!(
            "the untraced hot path changed at line {} of {}:\n  now:    {:?}\n  golden: {:?}\n(FERROCOMM_BLESS=1 rewrites it \
             after an intended change)",
            first + 1,
            golden_file().display(),
            text.lines().nth(first),
            golden.lines().nth(first)
        );
    }
}

#[test]
fn untraced_modules_hold_no_trace_code() {
    let all = PTX
        .iter()
        .chain(ferrocomm_kernels::__FERROCOMM_MODULE.ptx())
        .chain(ferrocomm_device_kernels::__FERROCOMM_MODULE.ptx());
    for (cc, ptx) in all {
        for mark in TRACE_MARKS {
            assert!(!ptx.contains(mark), "an untraced sm_{cc} module holds `{mark}`");
        }
    }
}

#[test]
fn the_traced_flavour_records_on_the_hot_path() {
    assert_eq!(TRACED_PTX.iter().map(|(cc, _)| *cc).collect::<Vec<_>>(), [90], "one architecture, the newest");
    let traced = module(TRACED_PTX, 90);
    assert!(
        traced.contains(".visible .const .align 8 .b8 FERROCOMM_TRACE_RING[16];"),
        "the ring's constant is missing"
    );
    for name in ["golden_signal_wait_ge", "golden_signal_set_release", "golden_put_signal_block"] {
        let body = entry(traced, name);
        assert!(body.contains("record_into_ring"), "traced `{name}` records nothing:\n{body}");
    }
    assert_ne!(hot_path_text(traced), hot_path_text(module(PTX, 90)));
    assert!(ferrocomm_kernels::__FERROCOMM_MODULE.traced_arches() == [90], "the collectives have a traced flavour");
}

#[test]
fn normalizing_keeps_instructions_and_drops_numbering() {
    let line = "call.uni _ZN3foo17h0123456789abcdefE, (%rd12); @%p3 bra $L__BB4_12; ld.u64 %rd1, [anon_$_3aa4_$_49];";
    assert_eq!(normalize(line), "call.uni _ZN3foo17hE, (%rd); @%p bra $L__BB; ld.u64 %rd, [anon_$__$_];");
}
