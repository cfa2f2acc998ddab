//! Launch bounds: `#[kernel(launch_bounds(threads, blocks))]` leaves a marker global per PTX entry
//! (`__ferrocomm_launch_bounds__<entry>`, two `u32`s: the most threads per block and the blocks per
//! multiprocessor, 0 for none), because Rust has no way to write PTX performance directives. This pass puts
//! them where ptxas reads them — `.maxntid threads, 1, 1` and `.minnctapersm blocks` between the entry's
//! parameter list and its body — and removes the markers. With both, ptxas keeps the entry's registers to
//! what `blocks` blocks of `threads` threads can share on one multiprocessor.

use crate::error::BuildError;

/// The prefix of a marker's name (the `#[kernel]` macro writes the same).
pub const MARKER_PREFIX: &str = "__ferrocomm_launch_bounds__";

/// An entry's bounds, as its marker gives them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Threads per block, at most.
    pub max_threads: u32,
    /// Blocks per multiprocessor to leave room for (`None`: no `.minnctapersm`).
    pub min_blocks: Option<u32>,
}

/// `ptx` with every marked entry's directives in place and the markers removed; `module` names the PTX in
/// errors. A marker whose entry is missing, or that is not eight initialised bytes, is an error.
pub fn apply(ptx: &str, module: &str) -> Result<String, BuildError> {
    let mut marked = Vec::new();
    let mut out = String::with_capacity(ptx.len() + 64);
    for line in ptx.lines() {
        match marker(line) {
            Some(found) => marked.push(found.map_err(|reason| bad(module, reason))?),
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    for (entry, bounds) in marked {
        out = with_directives(&out, &entry, bounds).ok_or_else(|| {
            bad(module, format!("launch bounds are given for entry `{entry}`, which the module does not have"))
        })?;
    }
    Ok(out)
}

fn bad(module: &str, reason: String) -> BuildError {
    BuildError::LaunchBounds { module: module.to_owned(), reason }
}

/// `Some` when `line` declares a marker: its entry and bounds, or why they cannot be read. The PTX form is
/// `.visible .global .align 4 .b8 __ferrocomm_launch_bounds__NAME[8] = {t0, t1, t2, t3, b0, b1, b2, b3};`,
/// trailing zero bytes left out.
fn marker(line: &str) -> Option<Result<(String, Bounds), String>> {
    let at = line.find(MARKER_PREFIX)?;
    let rest = &line[at + MARKER_PREFIX.len()..];
    let entry: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_' || *c == '$').collect();
    let parse = || -> Option<Bounds> {
        let (_, init) = rest.split_once('{')?;
        let (bytes, _) = init.split_once('}')?;
        let mut bytes: Vec<u8> = bytes.split(',').map(|b| b.trim().parse().ok()).collect::<Option<_>>()?;
        // The compiler leaves trailing zero bytes out of an initialiser.
        if bytes.len() > 8 || !rest.contains("[8]") {
            return None;
        }
        bytes.resize(8, 0);
        let [t0, t1, t2, t3, b0, b1, b2, b3] = bytes.try_into().ok()?;
        let (threads, blocks) = (u32::from_le_bytes([t0, t1, t2, t3]), u32::from_le_bytes([b0, b1, b2, b3]));
        Some(Bounds { max_threads: threads, min_blocks: (blocks > 0).then_some(blocks) })
    };
    Some(
        parse()
            .map(|b| (entry.clone(), b))
            .ok_or_else(|| format!("cannot read the launch bounds of `{entry}` from `{}`", line.trim())),
    )
}

/// `ptx` with `bounds` written between entry `entry`'s parameter list and its body (`None` without it).
fn with_directives(ptx: &str, entry: &str, bounds: Bounds) -> Option<String> {
    let start = ptx.find(&format!(".entry {entry}("))?;
    // The parameter list closes at the first `)` line after the header; the body opens after it.
    let close = start + ptx[start..].find("\n)")? + 2;
    let mut directives = format!("\n.maxntid {}, 1, 1", bounds.max_threads);
    if let Some(blocks) = bounds.min_blocks {
        directives.push_str(&format!("\n.minnctapersm {blocks}"));
    }
    Some(format!("{}{directives}{}", &ptx[..close], &ptx[close..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PTX: &str = "\
.version 8.0
.target sm_90
.address_size 64

.visible .global .align 4 .b8 __ferrocomm_launch_bounds__gemv[8] = {128, 0, 0, 0, 3, 0, 0, 0};
.visible .global .align 4 .b8 __ferrocomm_launch_bounds__wide[8] = {0, 4};

.visible .entry gemv(
	.param .u64 gemv_param_0
)
{
	ret;
}
.visible .entry wide(
	.param .u64 wide_param_0
)
{
	ret;
}
.visible .entry plain(
	.param .u64 plain_param_0
)
{
	ret;
}
";

    #[test]
    fn directives_go_between_the_parameters_and_the_body_and_the_markers_go() {
        let out = apply(PTX, "k.ptx").unwrap();
        assert!(!out.contains(MARKER_PREFIX), "{out}");
        assert!(
            out.contains(".entry gemv(\n\t.param .u64 gemv_param_0\n)\n.maxntid 128, 1, 1\n.minnctapersm 3\n{"),
            "{out}"
        );
        assert!(out.contains(".entry wide(\n\t.param .u64 wide_param_0\n)\n.maxntid 1024, 1, 1\n{"), "{out}");
        assert!(out.contains(".entry plain(\n\t.param .u64 plain_param_0\n)\n{"), "{out}");
    }

    #[test]
    fn a_module_without_markers_is_unchanged() {
        let plain = ".visible .entry plain(\n)\n{\n\tret;\n}\n";
        assert_eq!(apply(plain, "k.ptx").unwrap(), plain);
    }

    #[test]
    fn a_marker_without_its_entry_or_with_unreadable_bytes_is_an_error() {
        let orphan = ".visible .global .align 4 .b8 __ferrocomm_launch_bounds__gone[8] = {1, 0, 0, 0, 0, 0, 0, 0};\n";
        let e = apply(orphan, "k.ptx").unwrap_err().to_string();
        assert!(e.contains("`gone`") && e.contains("k.ptx"), "{e}");
        let short = ".visible .global .align 4 .b8 __ferrocomm_launch_bounds__gemv[4] = {1, 0, 0, 0};\n";
        let e = apply(short, "k.ptx").unwrap_err().to_string();
        assert!(e.contains("cannot read the launch bounds of `gemv`"), "{e}");
    }
}
