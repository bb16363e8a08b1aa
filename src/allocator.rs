//! The process's global allocator, one file for every program that runs the engine (`delta`
//! and `delta-bench`): a benchmark must measure the allocator the product ships with.
//!
//! mimalloc (the default `mimalloc` feature): glibc's malloc spent a fifth of the engine's
//! CPU in its arenas (`_int_malloc`, `malloc_consolidate`, `unlink_chunk`; BENCHMARKS.md).
//! Built without mimalloc's transparent huge pages, which took a single run from 13 to 29 MiB
//! resident.
//!
//! Must not: be left out of a program that reports engine figures (`delta-bench` once was,
//! and its `engine cpu` line then measured glibc's malloc, ≈ 0.1 ms more per iteration).

#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The allocator this program was built with, as benchmark reports name it.
#[allow(dead_code)] // `delta` has no report to name it in.
pub const NAME: &str = if cfg!(feature = "mimalloc") {
    "mimalloc"
} else {
    "system"
};
