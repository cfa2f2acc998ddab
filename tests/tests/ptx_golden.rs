//! PTX golden tests: the exact instructions each device intrinsic compiles to, in both modules (sm_80 and
//! sm_90) that `ferrocomm-golden-kernels` embeds. Each entry of that crate holds one intrinsic; a test
//! slices the entry out of the module, takes the text between its `// begin inline asm` /
//! `// end inline asm` markers, numbers its registers away (`%rd12` → `%rd`) and compares.
//!
//! A wrong scope or ordering (`.gpu` for `.sys`, relaxed for release) changes the text and fails here.

use ferrocomm_golden_kernels::PTX;

/// The embedded modules, checked to be the two architectures the tests pin.
fn modules() -> Vec<(u32, &'static str)> {
    let mut ccs: Vec<u32> = PTX.iter().map(|(cc, _)| *cc).collect();
    ccs.sort_unstable();
    assert_eq!(ccs, [80, 90], "the golden kernels must be built for sm_80 and sm_90 (FERROCOMM_PTX_ARCHES)");
    PTX.to_vec()
}

/// `%rd12` → `%rd`, `%r3` → `%r`, `%rs1` → `%rs`, `%p2` → `%p`, `%f4` → `%f`; special registers
/// (`%tid.x`, `%globaltimer`) stay as they are.
fn normalize(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        out.push(c);
        if c != '%' {
            continue;
        }
        let mut name = String::new();
        while let Some(&n) = chars.peek().filter(|n| n.is_ascii_alphabetic()) {
            name.push(n);
            chars.next();
        }
        out.push_str(&name);
        let virtual_reg = ["r", "rd", "rs", "p", "f", "fd"].contains(&name.as_str());
        if virtual_reg {
            while chars.peek().is_some_and(char::is_ascii_digit) {
                chars.next();
            }
        }
    }
    out
}

/// The text of `.entry name(...) { ... }` (panics naming the entry when the module lacks it).
fn entry<'a>(ptx: &'a str, name: &str) -> &'a str {
    try_entry(ptx, name).unwrap_or_else(|| panic!("entry `{name}` is missing from the module"))
}

fn try_entry<'a>(ptx: &'a str, name: &str) -> Option<&'a str> {
    let start = ptx.find(&format!(".entry {name}("))?;
    let end = ptx[start..].find("\n}\n").map(|e| start + e + 2)?;
    Some(&ptx[start..end])
}

/// The body of the `.func` whose name contains `fragment` (its definition, not its forward declaration).
fn func<'a>(ptx: &'a str, fragment: &str) -> &'a str {
    let mut from = 0;
    while let Some(pos) = ptx[from..].find(".func") {
        let start = from + pos;
        let header_end = ptx[start..].find('\n').map_or(ptx.len(), |e| start + e);
        let rest = &ptx[start..];
        let body_open = rest.find("\n{\n");
        let decl_end = rest.find(";\n");
        let is_definition = match (body_open, decl_end) {
            (Some(b), Some(d)) => b < d,
            (Some(_), None) => true,
            _ => false,
        };
        if ptx[start..header_end].contains(fragment) && is_definition {
            let end = ptx[start..].find("\n}\n").map_or(ptx.len(), |e| start + e + 2);
            return &ptx[start..end];
        }
        from = header_end;
    }
    panic!("no function definition whose name contains `{fragment}`")
}

/// Each inline asm block of `body`, normalised, its lines trimmed and joined with `\n`.
fn asm_blocks(body: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<Vec<String>> = None;
    for line in body.lines() {
        let line = line.trim();
        match line {
            "// begin inline asm" => current = Some(Vec::new()),
            "// end inline asm" => {
                if let Some(lines) = current.take() {
                    blocks.push(normalize(&lines.join("\n")));
                }
            }
            _ => {
                if let Some(lines) = current.as_mut() {
                    lines.push(line.to_owned());
                }
            }
        }
    }
    blocks
}

/// Asserts that entry `name` holds exactly the asm blocks `expected`, in order, in every module.
fn assert_entry_asm(name: &str, expected: &[&str]) {
    for (cc, ptx) in modules() {
        let blocks = asm_blocks(entry(ptx, name));
        assert_eq!(blocks, expected, "sm_{cc}: entry `{name}`");
    }
}

/// Asserts that entry `name` holds each of `expected` among its asm blocks, in every module.
fn assert_entry_contains(name: &str, expected: &[&str]) -> Vec<(u32, Vec<String>)> {
    modules()
        .into_iter()
        .map(|(cc, ptx)| {
            let blocks = asm_blocks(entry(ptx, name));
            for e in expected {
                assert!(blocks.iter().any(|b| b == e), "sm_{cc}: entry `{name}` lacks `{e}`; it has {blocks:#?}");
            }
            (cc, blocks)
        })
        .collect()
}

/// One test per entry whose asm is exactly the listed blocks.
macro_rules! golden {
    ($($test:ident: $entry:literal => [$($asm:literal),* $(,)?];)*) => { $(
        #[test]
        fn $test() {
            assert_entry_asm($entry, &[$($asm),*]);
        }
    )* };
}

#[test]
fn normalize_numbers_registers_away() {
    assert_eq!(
        normalize("ld.global.v4.b32 {%r12, %r3, %r4, %r5}, [%rd104]; mov.u32 %r1, %tid.x; @%p2 bra; %rs7 %f3 %fd9"),
        "ld.global.v4.b32 {%r, %r, %r, %r}, [%rd]; mov.u32 %r, %tid.x; @%p bra; %rs %f %fd"
    );
    assert_eq!(normalize("mov.u64 %rd7, %globaltimer;"), "mov.u64 %rd, %globaltimer;");
}

#[test]
fn asm_blocks_are_read_between_markers() {
    let body = "\tld.param.b64 %rd1, [p];\n\t// begin inline asm\n\tmov.u64 %rd2, T;\n\tcvta.shared.u64 %rd2, %rd2;\n\t\
                // end inline asm\n\tst.b32 [%rd2], %r1;\n";
    assert_eq!(asm_blocks(body), ["mov.u64 %rd, T;\ncvta.shared.u64 %rd, %rd;"]);
}

golden! {
    thread_idx_x: "golden_thread_idx_x" => ["mov.u32 %r, %tid.x;"];
    thread_idx_y: "golden_thread_idx_y" => ["mov.u32 %r, %tid.y;"];
    thread_idx_z: "golden_thread_idx_z" => ["mov.u32 %r, %tid.z;"];
    block_idx_x: "golden_block_idx_x" => ["mov.u32 %r, %ctaid.x;"];
    block_idx_y: "golden_block_idx_y" => ["mov.u32 %r, %ctaid.y;"];
    block_idx_z: "golden_block_idx_z" => ["mov.u32 %r, %ctaid.z;"];
    block_dim_x: "golden_block_dim_x" => ["mov.u32 %r, %ntid.x;"];
    block_dim_y: "golden_block_dim_y" => ["mov.u32 %r, %ntid.y;"];
    block_dim_z: "golden_block_dim_z" => ["mov.u32 %r, %ntid.z;"];
    grid_dim_x: "golden_grid_dim_x" => ["mov.u32 %r, %nctaid.x;"];
    grid_dim_y: "golden_grid_dim_y" => ["mov.u32 %r, %nctaid.y;"];
    grid_dim_z: "golden_grid_dim_z" => ["mov.u32 %r, %nctaid.z;"];
    lane_id: "golden_lane_id" => ["mov.u32 %r, %laneid;"];
    smid: "golden_smid" => ["mov.u32 %r, %smid;"];

    sync_threads: "golden_sync_threads" => ["barrier.sync 0;"];
    sync_warp: "golden_sync_warp" => ["bar.warp.sync %r;"];

    shfl_idx: "golden_shfl_idx" => ["shfl.sync.idx.b32 %r, %r, %r, 31, %r;"];
    shfl_up: "golden_shfl_up" => ["shfl.sync.up.b32 %r, %r, %r, 0, %r;"];
    shfl_down: "golden_shfl_down" => ["shfl.sync.down.b32 %r, %r, %r, 31, %r;"];
    shfl_xor: "golden_shfl_xor" => ["shfl.sync.bfly.b32 %r, %r, %r, 31, %r;"];
    shfl_xor_u64_is_two_shuffles: "golden_shfl_xor_u64" => [
        "shfl.sync.bfly.b32 %r, %r, %r, 31, %r;",
        "shfl.sync.bfly.b32 %r, %r, %r, 31, %r;",
    ];
    vote_ballot: "golden_vote_ballot" => [
        "{ .reg .pred vin; setp.ne.u32 vin, %r, 0; vote.sync.ballot.b32 %r, vin, %r; }",
    ];
    vote_any: "golden_vote_any" => [
        "{ .reg .pred vin; .reg .pred vout; setp.ne.u32 vin, %r, 0; vote.sync.any.pred vout, vin, %r; selp.u32 %r, 1, 0, vout; }",
    ];
    vote_all: "golden_vote_all" => [
        "{ .reg .pred vin; .reg .pred vout; setp.ne.u32 vin, %r, 0; vote.sync.all.pred vout, vin, %r; selp.u32 %r, 1, 0, vout; }",
    ];

    globaltimer: "golden_globaltimer" => ["mov.u64 %rd, %globaltimer;"];
    nanosleep: "golden_nanosleep" => ["nanosleep.u32 %r;"];

    gpu_u32_load_relaxed: "golden_gpu_u32_load_relaxed" => ["ld.relaxed.gpu.u32 %r, [%rd];"];
    gpu_u32_load_acquire: "golden_gpu_u32_load_acquire" => ["ld.acquire.gpu.u32 %r, [%rd];"];
    gpu_u64_load_relaxed: "golden_gpu_u64_load_relaxed" => ["ld.relaxed.gpu.u64 %rd, [%rd];"];
    gpu_u64_load_acquire: "golden_gpu_u64_load_acquire" => ["ld.acquire.gpu.u64 %rd, [%rd];"];
    sys_u32_load_relaxed: "golden_sys_u32_load_relaxed" => ["ld.relaxed.sys.u32 %r, [%rd];"];
    sys_u32_load_acquire: "golden_sys_u32_load_acquire" => ["ld.acquire.sys.u32 %r, [%rd];"];
    sys_u64_load_relaxed: "golden_sys_u64_load_relaxed" => ["ld.relaxed.sys.u64 %rd, [%rd];"];
    sys_u64_load_acquire: "golden_sys_u64_load_acquire" => ["ld.acquire.sys.u64 %rd, [%rd];"];

    gpu_u32_store_relaxed: "golden_gpu_u32_store_relaxed" => ["st.relaxed.gpu.u32 [%rd], %r;"];
    gpu_u32_store_release: "golden_gpu_u32_store_release" => ["st.release.gpu.u32 [%rd], %r;"];
    gpu_u64_store_relaxed: "golden_gpu_u64_store_relaxed" => ["st.relaxed.gpu.u64 [%rd], %rd;"];
    gpu_u64_store_release: "golden_gpu_u64_store_release" => ["st.release.gpu.u64 [%rd], %rd;"];
    sys_u32_store_relaxed: "golden_sys_u32_store_relaxed" => ["st.relaxed.sys.u32 [%rd], %r;"];
    sys_u32_store_release: "golden_sys_u32_store_release" => ["st.release.sys.u32 [%rd], %r;"];
    sys_u64_store_relaxed: "golden_sys_u64_store_relaxed" => ["st.relaxed.sys.u64 [%rd], %rd;"];
    sys_u64_store_release: "golden_sys_u64_store_release" => ["st.release.sys.u64 [%rd], %rd;"];

    gpu_u32_fetch_add_relaxed: "golden_gpu_u32_fetch_add_relaxed" => ["atom.relaxed.gpu.add.u32 %r, [%rd], %r;"];
    gpu_u32_fetch_add_acquire: "golden_gpu_u32_fetch_add_acquire" => ["atom.acquire.gpu.add.u32 %r, [%rd], %r;"];
    gpu_u32_fetch_add_release: "golden_gpu_u32_fetch_add_release" => ["atom.release.gpu.add.u32 %r, [%rd], %r;"];
    gpu_u32_fetch_add_acq_rel: "golden_gpu_u32_fetch_add_acq_rel" => ["atom.acq_rel.gpu.add.u32 %r, [%rd], %r;"];
    gpu_u32_swap_relaxed: "golden_gpu_u32_swap_relaxed" => ["atom.relaxed.gpu.exch.b32 %r, [%rd], %r;"];
    gpu_u32_swap_acquire: "golden_gpu_u32_swap_acquire" => ["atom.acquire.gpu.exch.b32 %r, [%rd], %r;"];
    gpu_u32_swap_release: "golden_gpu_u32_swap_release" => ["atom.release.gpu.exch.b32 %r, [%rd], %r;"];
    gpu_u32_swap_acq_rel: "golden_gpu_u32_swap_acq_rel" => ["atom.acq_rel.gpu.exch.b32 %r, [%rd], %r;"];
    gpu_u32_cas_relaxed: "golden_gpu_u32_cas_relaxed" => ["atom.relaxed.gpu.cas.b32 %r, [%rd], %r, %r;"];
    gpu_u32_cas_acquire: "golden_gpu_u32_cas_acquire" => ["atom.acquire.gpu.cas.b32 %r, [%rd], %r, %r;"];
    gpu_u32_cas_release: "golden_gpu_u32_cas_release" => ["atom.release.gpu.cas.b32 %r, [%rd], %r, %r;"];
    gpu_u32_cas_acq_rel: "golden_gpu_u32_cas_acq_rel" => ["atom.acq_rel.gpu.cas.b32 %r, [%rd], %r, %r;"];

    gpu_u64_fetch_add_relaxed: "golden_gpu_u64_fetch_add_relaxed" => ["atom.relaxed.gpu.add.u64 %rd, [%rd], %rd;"];
    gpu_u64_fetch_add_acquire: "golden_gpu_u64_fetch_add_acquire" => ["atom.acquire.gpu.add.u64 %rd, [%rd], %rd;"];
    gpu_u64_fetch_add_release: "golden_gpu_u64_fetch_add_release" => ["atom.release.gpu.add.u64 %rd, [%rd], %rd;"];
    gpu_u64_fetch_add_acq_rel: "golden_gpu_u64_fetch_add_acq_rel" => ["atom.acq_rel.gpu.add.u64 %rd, [%rd], %rd;"];
    gpu_u64_swap_relaxed: "golden_gpu_u64_swap_relaxed" => ["atom.relaxed.gpu.exch.b64 %rd, [%rd], %rd;"];
    gpu_u64_swap_acquire: "golden_gpu_u64_swap_acquire" => ["atom.acquire.gpu.exch.b64 %rd, [%rd], %rd;"];
    gpu_u64_swap_release: "golden_gpu_u64_swap_release" => ["atom.release.gpu.exch.b64 %rd, [%rd], %rd;"];
    gpu_u64_swap_acq_rel: "golden_gpu_u64_swap_acq_rel" => ["atom.acq_rel.gpu.exch.b64 %rd, [%rd], %rd;"];
    gpu_u64_cas_relaxed: "golden_gpu_u64_cas_relaxed" => ["atom.relaxed.gpu.cas.b64 %rd, [%rd], %rd, %rd;"];
    gpu_u64_cas_acquire: "golden_gpu_u64_cas_acquire" => ["atom.acquire.gpu.cas.b64 %rd, [%rd], %rd, %rd;"];
    gpu_u64_cas_release: "golden_gpu_u64_cas_release" => ["atom.release.gpu.cas.b64 %rd, [%rd], %rd, %rd;"];
    gpu_u64_cas_acq_rel: "golden_gpu_u64_cas_acq_rel" => ["atom.acq_rel.gpu.cas.b64 %rd, [%rd], %rd, %rd;"];

    sys_u32_fetch_add_relaxed: "golden_sys_u32_fetch_add_relaxed" => ["atom.relaxed.sys.add.u32 %r, [%rd], %r;"];
    sys_u32_fetch_add_acquire: "golden_sys_u32_fetch_add_acquire" => ["atom.acquire.sys.add.u32 %r, [%rd], %r;"];
    sys_u32_fetch_add_release: "golden_sys_u32_fetch_add_release" => ["atom.release.sys.add.u32 %r, [%rd], %r;"];
    sys_u32_fetch_add_acq_rel: "golden_sys_u32_fetch_add_acq_rel" => ["atom.acq_rel.sys.add.u32 %r, [%rd], %r;"];
    sys_u32_swap_relaxed: "golden_sys_u32_swap_relaxed" => ["atom.relaxed.sys.exch.b32 %r, [%rd], %r;"];
    sys_u32_swap_acquire: "golden_sys_u32_swap_acquire" => ["atom.acquire.sys.exch.b32 %r, [%rd], %r;"];
    sys_u32_swap_release: "golden_sys_u32_swap_release" => ["atom.release.sys.exch.b32 %r, [%rd], %r;"];
    sys_u32_swap_acq_rel: "golden_sys_u32_swap_acq_rel" => ["atom.acq_rel.sys.exch.b32 %r, [%rd], %r;"];
    sys_u32_cas_relaxed: "golden_sys_u32_cas_relaxed" => ["atom.relaxed.sys.cas.b32 %r, [%rd], %r, %r;"];
    sys_u32_cas_acquire: "golden_sys_u32_cas_acquire" => ["atom.acquire.sys.cas.b32 %r, [%rd], %r, %r;"];
    sys_u32_cas_release: "golden_sys_u32_cas_release" => ["atom.release.sys.cas.b32 %r, [%rd], %r, %r;"];
    sys_u32_cas_acq_rel: "golden_sys_u32_cas_acq_rel" => ["atom.acq_rel.sys.cas.b32 %r, [%rd], %r, %r;"];

    sys_u64_fetch_add_relaxed: "golden_sys_u64_fetch_add_relaxed" => ["atom.relaxed.sys.add.u64 %rd, [%rd], %rd;"];
    sys_u64_fetch_add_acquire: "golden_sys_u64_fetch_add_acquire" => ["atom.acquire.sys.add.u64 %rd, [%rd], %rd;"];
    sys_u64_fetch_add_release: "golden_sys_u64_fetch_add_release" => ["atom.release.sys.add.u64 %rd, [%rd], %rd;"];
    sys_u64_fetch_add_acq_rel: "golden_sys_u64_fetch_add_acq_rel" => ["atom.acq_rel.sys.add.u64 %rd, [%rd], %rd;"];
    sys_u64_swap_relaxed: "golden_sys_u64_swap_relaxed" => ["atom.relaxed.sys.exch.b64 %rd, [%rd], %rd;"];
    sys_u64_swap_acquire: "golden_sys_u64_swap_acquire" => ["atom.acquire.sys.exch.b64 %rd, [%rd], %rd;"];
    sys_u64_swap_release: "golden_sys_u64_swap_release" => ["atom.release.sys.exch.b64 %rd, [%rd], %rd;"];
    sys_u64_swap_acq_rel: "golden_sys_u64_swap_acq_rel" => ["atom.acq_rel.sys.exch.b64 %rd, [%rd], %rd;"];
    sys_u64_cas_relaxed: "golden_sys_u64_cas_relaxed" => ["atom.relaxed.sys.cas.b64 %rd, [%rd], %rd, %rd;"];
    sys_u64_cas_acquire: "golden_sys_u64_cas_acquire" => ["atom.acquire.sys.cas.b64 %rd, [%rd], %rd, %rd;"];
    sys_u64_cas_release: "golden_sys_u64_cas_release" => ["atom.release.sys.cas.b64 %rd, [%rd], %rd, %rd;"];
    sys_u64_cas_acq_rel: "golden_sys_u64_cas_acq_rel" => ["atom.acq_rel.sys.cas.b64 %rd, [%rd], %rd, %rd;"];
    gpu_u64_add_relaxed: "golden_gpu_u64_add_relaxed" => [
        "cvta.to.global.u64 %rd, %rd;\nred.relaxed.gpu.global.add.u64 [%rd], %rd;",
    ];
    sys_u64_add_relaxed: "golden_sys_u64_add_relaxed" => [
        "cvta.to.global.u64 %rd, %rd;\nred.relaxed.sys.global.add.u64 [%rd], %rd;",
    ];
    sys_u64_add_release: "golden_sys_u64_add_release" => [
        "cvta.to.global.u64 %rd, %rd;\nred.release.sys.global.add.u64 [%rd], %rd;",
    ];

    fence_acq_rel_cta: "golden_fence_acq_rel_cta" => ["fence.acq_rel.cta;"];
    fence_acq_rel_gpu: "golden_fence_acq_rel_gpu" => ["fence.acq_rel.gpu;"];
    fence_acq_rel_sys: "golden_fence_acq_rel_sys" => ["fence.acq_rel.sys;"];
    fence_sc_gpu: "golden_fence_sc_gpu" => ["fence.sc.gpu;"];
    fence_sc_sys: "golden_fence_sc_sys" => ["fence.sc.sys;"];

    signal_set_release: "golden_signal_set_release" => ["st.release.sys.u64 [%rd], %rd;"];
    signal_set_relaxed: "golden_signal_set_relaxed" => ["st.relaxed.sys.u64 [%rd], %rd;"];
    signal_add_relaxed: "golden_signal_add_relaxed" => [
        "cvta.to.global.u64 %rd, %rd;\nred.relaxed.sys.global.add.u64 [%rd], %rd;",
    ];
    signal_add_release: "golden_signal_add_release" => [
        "cvta.to.global.u64 %rd, %rd;\nred.release.sys.global.add.u64 [%rd], %rd;",
    ];
    signal_load_acquire: "golden_signal_load_acquire" => ["ld.acquire.sys.u64 %rd, [%rd];"];

    ld_v4: "golden_ld_v4" => ["cvta.to.global.u64 %rd, %rd;", "ld.global.v4.b32 {%r, %r, %r, %r}, [%rd];"];
    st_v4: "golden_st_v4" => ["cvta.to.global.u64 %rd, %rd;", "st.global.v4.b32 [%rd], {%r, %r, %r, %r};"];
    ll_store_is_one_16_byte_volatile_store: "golden_ll_store" => [
        "cvta.to.global.u64 %rd, %rd;",
        "st.volatile.global.v4.b32 [%rd], {%r, %r, %r, %r};",
    ];
    ll_load_is_one_16_byte_volatile_load: "golden_ll_load" => [
        "cvta.to.global.u64 %rd, %rd;",
        "ld.volatile.global.v4.b32 {%r, %r, %r, %r}, [%rd];",
    ];

    bf16_add: "golden_bf16_add" => ["{ .reg .b16 one; mov.b16 one, 0x3F80; fma.rn.bf16 %rs, %rs, one, %rs; }"];
    f16_add: "golden_f16_add" => ["add.rn.f16 %rs, %rs, %rs;"];
    rsqrt: "golden_rsqrt" => ["rsqrt.approx.f32 %r, %r;"];
    fma: "golden_fma" => ["fma.rn.f32 %r, %r, %r, %r;"];
    pack_low_halves: "golden_pack_low_halves" => ["prmt.b32 %r, %r, %r, 0x5410;"];
    pack_high_halves: "golden_pack_high_halves" => ["prmt.b32 %r, %r, %r, 0x7632;"];
    mma_bf16: "golden_mma_bf16" => [
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%r, %r, %r, %r}, {%r, %r, %r, %r}, {%r, %r}, {%r, %r, %r, %r};",
    ];
    bf16_from_f32: "golden_bf16_from_f32" => ["cvt.rn.bf16.f32 %rs, %r;"];
    f16_from_f32: "golden_f16_from_f32" => ["cvt.rn.f16.f32 %rs, %r;"];
    f16_to_f32: "golden_f16_to_f32" => ["cvt.f32.f16 %r, %rs;"];

    exit_thread_is_exit_not_trap: "golden_exit_thread" => ["exit;"];
}

#[test]
fn static_shared_array_is_a_module_shared_declaration() {
    assert_entry_asm("golden_shared_array", &["mov.u64 %rd, GOLDEN_TILE;\ncvta.shared.u64 %rd, %rd;"]);
    for (cc, ptx) in modules() {
        assert!(ptx.contains("\n.shared .align 16 .b8 GOLDEN_TILE[256];\n"), "sm_{cc}: no GOLDEN_TILE declaration");
    }
}

#[test]
fn dynamic_shared_is_the_extern_array_and_its_size_register() {
    assert_entry_asm(
        "golden_dynamic_shared",
        &["mov.u64 %rd, FERROCOMM_DYN_SHARED;\ncvta.shared.u64 %rd, %rd;", "mov.u32 %r, %dynamic_smem_size;"],
    );
    for (cc, ptx) in modules() {
        assert!(
            ptx.contains("\n.extern .shared .align 16 .b8 FERROCOMM_DYN_SHARED[];\n"),
            "sm_{cc}: no FERROCOMM_DYN_SHARED declaration"
        );
    }
}

#[test]
fn launch_context_is_a_visible_module_global_read_once_by_team() {
    for (cc, ptx) in modules() {
        assert!(
            ptx.contains(".visible .global .align 8 .b8 FERROCOMM_LAUNCH_CTX[24]"),
            "sm_{cc}: FERROCOMM_LAUNCH_CTX is not a visible 24-byte global"
        );
        // `team::rank() + team::world()`: one non-coherent load of both (the reads are pure, so they merge).
        let body = entry(ptx, "golden_team_rank");
        assert_eq!(asm_blocks(body), ["ld.global.nc.v2.u32 {%r, %r}, [FERROCOMM_LAUNCH_CTX];"], "sm_{cc}");
    }
}

/// A module's PTX ISA version, `(major, minor)`, and its `.version` text.
fn isa_version(ptx: &str) -> ((u32, u32), &str) {
    let version = ptx.lines().find_map(|l| l.strip_prefix(".version ")).expect("a .version line").trim();
    let (major, minor) = version.split_once('.').expect("major.minor");
    ((major.parse().unwrap(), minor.parse().unwrap()), version)
}

#[test]
fn fence_proxy_async_exists_exactly_where_ptx_8_allows_it() {
    for (cc, ptx) in modules() {
        let (isa, version) = isa_version(ptx);
        let ptx8 = isa >= (8, 0);
        match try_entry(ptx, "golden_fence_proxy_async") {
            Some(body) => {
                assert!(cc >= 90 && ptx8, "sm_{cc} PTX {version}: fence.proxy.async needs sm_90 and PTX 8.0");
                assert_eq!(asm_blocks(body), ["fence.proxy.async;"]);
            }
            None => assert!(!(cc >= 90 && ptx8), "sm_{cc} PTX {version}: the fence.proxy.async entry is missing"),
        }
    }
}

/// Entry `name` (its pointer converted to global, then one access) holds `hinted` in the PTX ISA 8.0 builds
/// (the sm_90 module; the cache hints need 7.4, and the sm_80 module is 7.0) and `plain` elsewhere.
fn assert_hinted_where_the_ptx_allows(name: &str, hinted: &str, plain: &str) {
    for (cc, ptx) in modules() {
        let (isa, version) = isa_version(ptx);
        let is_hinted = isa >= (8, 0);
        let access = if is_hinted { hinted } else { plain };
        let blocks = asm_blocks(entry(ptx, name));
        assert_eq!(blocks, ["cvta.to.global.u64 %rd, %rd;", access], "{name}: sm_{cc} (PTX {version})");
        assert_eq!(is_hinted, cc >= 90, "sm_{cc}: PTX {version}");
    }
}

/// The streamed load carries the L1 hint where the PTX allows and is the plain vector load elsewhere.
#[test]
fn streamed_load_skips_l1_allocation_where_the_ptx_allows() {
    assert_hinted_where_the_ptx_allows(
        "golden_ld_v4_streamed",
        "ld.global.L1::no_allocate.v4.b32 {%r, %r, %r, %r}, [%rd];",
        "ld.global.v4.b32 {%r, %r, %r, %r}, [%rd];",
    );
}

/// The kept store carries its L2 policy where the PTX allows and is the plain vector store elsewhere.
#[test]
fn kept_store_asks_l2_to_evict_it_last_where_the_ptx_allows() {
    assert_hinted_where_the_ptx_allows(
        "golden_st_v4_kept",
        "{ .reg .b64 pol; createpolicy.fractional.L2::evict_last.b64 pol, 1.0; \
         st.global.L2::cache_hint.v4.b32 [%rd], {%r, %r, %r, %r}, pol; }",
        "st.global.v4.b32 [%rd], {%r, %r, %r, %r};",
    );
}

/// The TMA entries and their exact PTX: in the sm_90 module, and absent from the sm_80 one.
const TMA_GOLDEN: &[(&str, &[&str])] = &[
    ("golden_mbarrier_init", &["mbarrier.init.shared::cta.b64 [%r], %r;"]),
    ("golden_mbarrier_arrive_expect_tx", &["mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r], %r;"]),
    (
        "golden_mbarrier_try_wait_parity",
        &["{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%r], %r; selp.u32 %r, 1, 0, p; }"],
    ),
    (
        "golden_bulk_load",
        &[
            "cvta.to.global.u64 %rd, %rd;",
            "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%r], [%rd], %r, [%r];",
        ],
    ),
    (
        "golden_bulk_store",
        &["cvta.to.global.u64 %rd, %rd;", "cp.async.bulk.global.shared::cta.bulk_group [%rd], [%r], %r;"],
    ),
    ("golden_bulk_commit", &["cp.async.bulk.commit_group;"]),
    ("golden_bulk_wait_read_1", &["cp.async.bulk.wait_group.read 1;"]),
    ("golden_bulk_wait_0", &["cp.async.bulk.wait_group 0;"]),
];

#[test]
fn tma_intrinsics_are_pinned_on_sm_90_and_absent_before() {
    for (cc, ptx) in modules() {
        for (name, expected) in TMA_GOLDEN {
            match (cc >= 90, try_entry(ptx, name)) {
                (true, Some(body)) => assert_eq!(asm_blocks(body), *expected, "sm_{cc}: entry `{name}`"),
                (true, None) => panic!("sm_{cc}: the TMA entry `{name}` is missing"),
                (false, Some(_)) => panic!("sm_{cc}: `{name}` exists, but TMA needs sm_90"),
                (false, None) => {}
            }
        }
    }
}

#[test]
fn proxy_fences_are_pinned_on_sm_90_and_nothing_before() {
    for (name, asm) in [
        ("golden_fence_proxy_async_global", "fence.proxy.async.global;"),
        ("golden_fence_proxy_async_shared_cta", "fence.proxy.async.shared::cta;"),
    ] {
        for (cc, ptx) in modules() {
            let expected: &[&str] = if cc >= 90 { &[asm] } else { &[] };
            assert_eq!(asm_blocks(entry(ptx, name)), expected, "sm_{cc}: entry `{name}`");
        }
    }
}

#[test]
fn dynamic_shared_window_is_the_symbol_offset_and_size() {
    assert_entry_asm(
        "golden_dynamic_shared_window",
        &["mov.u32 %r, FERROCOMM_DYN_SHARED;", "mov.u32 %r, %dynamic_smem_size;"],
    );
}

#[test]
fn wait_polls_with_acquire_backs_off_and_times_out_by_exiting() {
    for (cc, blocks) in assert_entry_contains(
        "golden_signal_wait_ge",
        &["ld.acquire.sys.u64 %rd, [%rd];", "nanosleep.u32 %r;", "mov.u64 %rd, %globaltimer;"],
    ) {
        // The signal is polled with acquire loads; the only relaxed load is of the team's abort word, which the
        // back-off path reads between its polls (a panic anywhere in the team ends the wait).
        assert!(!blocks.iter().any(|b| b.contains("ld.relaxed.sys.u64") || b == "trap;"), "sm_{cc}: {blocks:#?}");
        assert!(
            blocks.iter().any(|b| b == "ld.relaxed.sys.u32 %r, [%rd];"),
            "sm_{cc}: no abort-word poll: {blocks:#?}"
        );
    }
    for (cc, ptx) in modules() {
        let aborted = func(ptx, "error7aborted");
        assert!(aborted.contains("error6record"), "sm_{cc}: an aborted wait is not recorded:\n{aborted}");
        let blocks = asm_blocks(aborted);
        assert_eq!(blocks.last().map(String::as_str), Some("exit;"), "sm_{cc}: an aborted wait must end with exit");
        let timed_out = func(ptx, "signal9timed_out");
        assert!(timed_out.contains("error14record_timeout"), "sm_{cc}: the timeout is not recorded:\n{timed_out}");
        let blocks = asm_blocks(timed_out);
        assert_eq!(blocks.last().map(String::as_str), Some("exit;"), "sm_{cc}: a timeout must end with exit");
        assert!(!blocks.iter().any(|b| b == "trap;"), "sm_{cc}: a timeout must not trap");
    }
}

#[test]
fn relaxed_wait_polls_with_relaxed_loads() {
    for (cc, blocks) in assert_entry_contains("golden_signal_wait_relaxed", &["ld.relaxed.sys.u64 %rd, [%rd];"]) {
        assert!(!blocks.iter().any(|b| b.contains("acquire")), "sm_{cc}: {blocks:#?}");
    }
}

#[test]
fn pad_epoch_is_a_relaxed_load_and_ends_with_posted_adds_after_the_barrier() {
    const ADD: &str = "cvta.to.global.u64 %rd, %rd;\nred.relaxed.gpu.global.add.u64 [%rd], %rd;";
    for (cc, blocks) in
        assert_entry_contains("golden_pad_epoch", &["ld.relaxed.gpu.u64 %rd, [%rd];", "barrier.sync 0;", ADD])
    {
        // One load (the epoch, at the start), no read-modify-write that returns, no fence: the end of an
        // epoch costs one posted add per block.
        assert_eq!(blocks.iter().filter(|b| b.starts_with("ld.")).count(), 1, "sm_{cc}: {blocks:#?}");
        assert!(!blocks.iter().any(|b| b.starts_with("atom.") || b.starts_with("fence.")), "sm_{cc}: {blocks:#?}");
        let pos = |s: &str| blocks.iter().position(|b| b == s).unwrap();
        assert!(pos("barrier.sync 0;") < pos(ADD), "sm_{cc}: {blocks:#?}");
    }
}

#[test]
fn grid_dependency_control_exists_on_sm_90_only() {
    for (cc, ptx) in modules() {
        let blocks = asm_blocks(entry(ptx, "golden_grid_dependency"));
        let expected: &[&str] =
            if cc >= 90 { &["griddepcontrol.wait;", "griddepcontrol.launch_dependents;"] } else { &[] };
        assert_eq!(blocks, expected, "sm_{cc}");
    }
}

const LD_V4: &str = "ld.global.v4.b32 {%r, %r, %r, %r}, [%rd];";
const ST_V4: &str = "st.global.v4.b32 [%rd], {%r, %r, %r, %r};";

#[test]
fn thread_put_body_is_16_byte_vectors_with_unit_heads_and_tails() {
    for (cc, blocks) in assert_entry_contains(
        "golden_put",
        &[
            "cvta.to.global.u64 %rd, %rd;",
            LD_V4,
            ST_V4,
            "ld.global.b64 %rd, [%rd];",
            "st.global.b64 [%rd], %rd;",
            "ld.global.b32 %r, [%rd];",
            "ld.global.b16 %rs, [%rd];",
            "ld.global.u8 %rs, [%rd];",
            "st.global.u8 [%rd], %rs;",
        ],
    ) {
        // Four vectors in flight per thread: the unrolled body loads four before storing.
        let first_store = blocks.iter().position(|b| b == ST_V4).unwrap();
        let loads_before = blocks[..first_store].iter().filter(|b| *b == LD_V4).count();
        assert!(loads_before >= 4, "sm_{cc}: {loads_before} vector loads before the first vector store");
    }
}

/// Whether every occurrence of asm block `second` in `body` is reached only straight from asm block
/// `first`: `first` is the asm block just before it and no label (branch target) lies between them.
fn only_reached_through(body: &str, first: &str, second: &str) -> bool {
    let mut previous: Option<String> = None;
    let mut label_since = false;
    let mut current: Option<Vec<String>> = None;
    let mut seen = false;
    for line in body.lines().map(str::trim) {
        match line {
            "// begin inline asm" => current = Some(Vec::new()),
            "// end inline asm" => {
                let block = normalize(&current.take().unwrap_or_default().join("\n"));
                if block == second {
                    seen = true;
                    if previous.as_deref() != Some(first) || label_since {
                        return false;
                    }
                }
                previous = Some(block);
                label_since = false;
            }
            _ if current.is_some() => current.as_mut().unwrap().push(line.to_owned()),
            _ if line.starts_with('$') && line.ends_with(':') => label_since = true,
            _ => {}
        }
    }
    seen
}

#[test]
fn block_put_with_signal_copies_then_barrier_then_release_add() {
    let red = "cvta.to.global.u64 %rd, %rd;\nred.release.sys.global.add.u64 [%rd], %rd;";
    assert_entry_contains("golden_put_signal_block", &[LD_V4, ST_V4, "barrier.sync 0;", red]);
    for (cc, ptx) in modules() {
        let body = entry(ptx, "golden_put_signal_block");
        assert!(only_reached_through(body, "barrier.sync 0;", red), "sm_{cc}: the signal is raised before the barrier");
    }
}

#[test]
fn block_put_and_warp_get_use_the_vector_body() {
    assert_entry_contains("golden_put_block", &[LD_V4, ST_V4, "barrier.sync 0;", "ld.global.u8 %rs, [%rd];"]);
    assert_entry_contains("golden_get_warp", &[LD_V4, ST_V4, "bar.warp.sync %r;", "mov.u32 %r, %laneid;"]);
}

#[test]
fn non_blocking_put_quiet_is_warp_barrier_then_system_fence() {
    assert_entry_contains("golden_put_nbi_quiet", &[LD_V4, ST_V4, "bar.warp.sync %r;", "fence.acq_rel.sys;"]);
    for (cc, ptx) in modules() {
        let body = entry(ptx, "golden_put_nbi_quiet");
        assert!(
            only_reached_through(body, "bar.warp.sync %r;", "fence.acq_rel.sys;"),
            "sm_{cc}: quiet is not barrier + fence"
        );
    }
}

#[test]
fn ll_put_stores_each_packet_with_a_single_16_byte_store() {
    for (cc, blocks) in assert_entry_contains("golden_put_ll", &["st.volatile.global.v4.b32 [%rd], {%r, %r, %r, %r};"])
    {
        let stores: Vec<_> = blocks.iter().filter(|b| b.starts_with("st.")).collect();
        assert!(
            stores.iter().all(|b| *b == "st.volatile.global.v4.b32 [%rd], {%r, %r, %r, %r};"),
            "sm_{cc}: LL put stores something else: {stores:#?}"
        );
        assert!(!blocks.iter().any(|b| b.starts_with("fence") || b.contains("release")), "sm_{cc}: {blocks:#?}");
    }
    for (cc, ptx) in modules() {
        // Outside the asm blocks, the entry stores nothing (argument passing aside).
        let mut in_asm = false;
        let mut plain_stores = Vec::new();
        for line in entry(ptx, "golden_put_ll").lines().map(str::trim) {
            match line {
                "// begin inline asm" => in_asm = true,
                "// end inline asm" => in_asm = false,
                _ if !in_asm && line.starts_with("st.") && !line.starts_with("st.param") => plain_stores.push(line),
                _ => {}
            }
        }
        assert!(plain_stores.is_empty(), "sm_{cc}: stores outside the packet store: {plain_stores:#?}");
    }
}

#[test]
fn ll_read_polls_volatile_16_byte_loads_without_fences() {
    for (cc, blocks) in assert_entry_contains(
        "golden_read_ll",
        &["ld.volatile.global.v4.b32 {%r, %r, %r, %r}, [%rd];", "nanosleep.u32 %r;", "mov.u64 %rd, %globaltimer;"],
    ) {
        assert!(!blocks.iter().any(|b| b.starts_with("fence") || b.contains("acquire")), "sm_{cc}: {blocks:#?}");
    }
}

#[test]
fn panic_handler_records_raises_the_abort_and_exits() {
    for (cc, ptx) in modules() {
        let bounds = entry(ptx, "golden_panic");
        assert!(bounds.contains("panic_bounds_check"), "sm_{cc}: no bounds check in golden_panic");
        let handler = func(ptx, "rust_begin_unwind");
        assert!(handler.contains("error12record_panic"), "sm_{cc}: the panic handler does not record:\n{handler}");
        // `exit`, never `trap`: a trap would lose the CUDA context for every later call of the process.
        let blocks = asm_blocks(handler);
        assert_eq!(blocks.last().map(String::as_str), Some("exit;"), "sm_{cc}: no exit after the record");
        assert!(!blocks.iter().any(|b| b == "trap;"), "sm_{cc}: the panic handler traps: {blocks:#?}");
        let raise = asm_blocks(func(ptx, "error11raise_abort"));
        assert!(raise.iter().any(|b| b == "st.relaxed.sys.u32 [%rd], %r;"), "sm_{cc}: no abort-word store: {raise:#?}");
        let record = asm_blocks(func(ptx, "ferrocomm_device5error6record"));
        for expected in ["atom.relaxed.gpu.add.u32 %r, [%rd], %r;", "st.release.sys.u32 [%rd], %r;"] {
            assert!(record.iter().any(|b| b == expected), "sm_{cc}: the record lacks `{expected}`: {record:#?}");
        }
    }
}
