# Punctual's two commands: `make up` (the whole stack, locally, with a demo timer) and
# `make test` (the whole test suite against real Postgres and a real broker).
.PHONY: up down test bench build check fmt sqlx-prepare

up:
	@scripts/up.sh

down:
	@scripts/down.sh

test:
	@scripts/test.sh

# Benchmarks (docs/BENCHMARKS.md): the end-to-end scenarios and baselines, release build,
# results in target/bench (results.md, results.json, lag-vs-rate.svg); then the wheel.
bench:
	@scripts/stack.sh tools
	cargo build --release --workspace --bins
	target/release/punctual-bench run --out target/bench
	cargo bench -p punctual-wheel

build:
	cargo build --workspace --bins

check:
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings

fmt:
	cargo fmt --all

# After changing a statement checked at compile time or a migration: writes .sqlx/ afresh
# (on a Postgres of its own), to be committed; `make test` fails while it is stale.
sqlx-prepare:
	@scripts/sqlx.sh prepare
