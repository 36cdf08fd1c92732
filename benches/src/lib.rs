//! What the benchmarks of sangho-webhook share (`cargo bench -p sangho-webhook-benches`), and
//! the layer's cases, which `tools/layer-profile` runs too.

pub mod layer;

/// Whether this is a plain `cargo bench` run: not `cargo test --benches`, not criterion's
/// `--profile-time` (for profilers) or `--list`. The interleaved checks run only then.
pub fn is_plain_bench_run() -> bool {
    let args: Vec<String> = std::env::args().collect();
    args.iter().any(|arg| arg == "--bench")
        && !args
            .iter()
            .any(|arg| arg == "--profile-time" || arg == "--list")
}
