//! The timing wheel against a binary heap: insert n entries with deadlines spread over a
//! minute, then expire them all, one millisecond tick at a time (as the scanner does).
//!
//! `cargo bench -p punctual-wheel` (full: 10k, 1M, 10M entries);
//! `cargo bench -p punctual-wheel -- --test` runs each case once (the CI smoke).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use punctual_wheel::TimingWheel;

const WINDOW_MS: u64 = 60_000;
const START: u64 = 1_700_000_000_000;

/// Deterministic pseudo-random deadlines within the window.
fn deadlines(n: usize) -> Vec<u64> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            START + 1 + x % WINDOW_MS
        })
        .collect()
}

fn wheel_round(deadlines: &[u64]) -> usize {
    let mut wheel = TimingWheel::new(START);
    for (i, d) in deadlines.iter().enumerate() {
        let _ = wheel.insert(*d, i as u64);
    }
    let mut expired = Vec::new();
    let mut count = 0;
    for now in START + 1..=START + WINDOW_MS {
        wheel.advance(now, &mut expired);
        count += expired.len();
        expired.clear();
    }
    count
}

fn heap_round(deadlines: &[u64]) -> usize {
    let mut heap = BinaryHeap::with_capacity(deadlines.len());
    for (i, d) in deadlines.iter().enumerate() {
        heap.push(Reverse((*d, i as u64)));
    }
    let mut count = 0;
    for now in START + 1..=START + WINDOW_MS {
        while heap.peek().is_some_and(|Reverse((d, _))| *d <= now) {
            heap.pop();
            count += 1;
        }
    }
    count
}

fn insert_and_expire(c: &mut Criterion) {
    let sizes: Vec<usize> = match std::env::var("WHEEL_BENCH_SIZES") {
        Ok(v) => v.split(',').filter_map(|s| s.trim().parse().ok()).collect(),
        Err(_) => vec![10_000, 1_000_000, 10_000_000],
    };
    let mut group = c.benchmark_group("insert+expire");
    group.sample_size(10).measurement_time(Duration::from_secs(10));
    for n in sizes {
        let d = deadlines(n);
        group.throughput(Throughput::Elements(n as u64));
        group.bench_with_input(BenchmarkId::new("wheel", n), &d, |b, d| {
            b.iter_custom(|iters| {
                let start = Instant::now();
                for _ in 0..iters {
                    assert_eq!(wheel_round(d), d.len());
                }
                start.elapsed()
            })
        });
        group.bench_with_input(BenchmarkId::new("binary_heap", n), &d, |b, d| {
            b.iter_custom(|iters| {
                let start = Instant::now();
                for _ in 0..iters {
                    assert_eq!(heap_round(d), d.len());
                }
                start.elapsed()
            })
        });
    }
    group.finish();
}

criterion_group!(benches, insert_and_expire);
criterion_main!(benches);
