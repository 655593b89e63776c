//! Criterion benches of the four strategies on the synthetic groups of `gregor bench assign`,
//! at sizes that keep a regression run short (the full-size figures come from
//! `gregor bench assign`; see BENCHMARKS.md).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use gregor_assign::builtin;
use gregor_assign::synthetic::{Subscriptions, Synthetic};

fn cases() -> Vec<(&'static str, Synthetic)> {
    let base = Synthetic {
        topics: 100,
        partitions: 100,
        members: 200,
        subscriptions: Subscriptions::Uniform,
        owned_prev: false,
        racks: 0,
    };
    vec![
        ("uniform", base),
        (
            "uniform-prev",
            Synthetic {
                owned_prev: true,
                ..base
            },
        ),
        (
            "nonuniform",
            Synthetic {
                subscriptions: Subscriptions::Nonuniform,
                ..base
            },
        ),
        (
            "nonuniform-prev",
            Synthetic {
                subscriptions: Subscriptions::Nonuniform,
                owned_prev: true,
                ..base
            },
        ),
        ("uniform-racks3", Synthetic { racks: 3, ..base }),
    ]
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("assign-10k-partitions-200-members");
    group.sample_size(20);
    for (name, synthetic) in cases() {
        let spec = synthetic.build().expect("valid synthetic group");
        for strategy in ["range", "roundrobin", "sticky", "cooperative-sticky"] {
            let assignor = builtin(strategy).expect("built-in strategy");
            group.bench_with_input(BenchmarkId::new(strategy, name), &spec, |b, spec| {
                b.iter(|| assignor.assign(spec).expect("assignment"))
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
