# Punctual's two commands: `make up` (the whole stack, locally, with a demo timer) and
# `make test` (the whole test suite against real Postgres and a real broker).
.PHONY: up down test bench build check fmt

up:
	@scripts/up.sh

down:
	@scripts/down.sh

test:
	@scripts/test.sh

# Benchmarks: see docs/BENCHMARKS.md for what exists so far and the figures.
bench:
	cargo bench -p punctual-wheel

build:
	cargo build --workspace --bins

check:
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings

fmt:
	cargo fmt --all
