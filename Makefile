# The two commands a newcomer needs: `make run` and `make test` (see README.md).
# Everything but `make bench-release` builds with the dev profile: a release build of this
# workspace takes ~20 minutes on two cores, and CI must not build two profiles.

CARGO ?= cargo
BIN := target/debug/leasehold

PREFIX ?= $(HOME)/.local

.PHONY: deps build install run test test-fast sim sim-suite bench bench-release chaos lint fmt clean guests image screenshot

deps:
	@scripts/install-deps.sh

# The binary and the test harness's library, in one build: cargo picks each dependency's features
# from the packages a command names, so building the host alone would compile most of its
# dependencies a second time for `make test`, with the features the test crates add.
build: deps
	$(CARGO) build -p leasehold -p leasehold-tests

# `leasehold` on PATH for `leasehold new`, `check` and `status` from any directory: the dev
# binary `make run` builds, copied to $(PREFIX)/bin (~/.local/bin, which Debian's ~/.profile
# puts on PATH once it exists; `sudo make install PREFIX=/usr/local` for every user). Copied,
# not `cargo install`ed: that builds the release profile in a target dir of its own, ~20
# minutes on two cores, for a binary the plugin steps only need to create, check and run one
# plugin with. The binary carries the Rust SDK a Rust project gets a copy of: the checkout may
# move.
install: build
	install -D -m 0755 $(BIN) $(DESTDIR)$(PREFIX)/bin/leasehold
	@echo "installed $(DESTDIR)$(PREFIX)/bin/leasehold (if 'leasehold --version' is not found, add $(PREFIX)/bin to PATH)"

# The main job: hold the lease `leader` on the embedded SQLite file ./leasehold.db and run the
# example plugins from ./plugins (drop more NAME.wasm + NAME.toml files there).
run: build guests
	mkdir -p plugins
	cp -u guests/dist/hello-reconciler.wasm guests/dist/hello-reconciler.toml guests/dist/flaky-health.wasm guests/dist/flaky-health.toml plugins/
	$(BIN) run --plugins plugins

# The whole suite (scripts/test-suite.sh): unit tests, the store conformance suite (memory,
# SQLite, a PostgreSQL the harness starts itself unless DATABASE_URL is set), the process tests and
# the plugin tests with real compiled guests, the guests' own unit tests natively (the SDK, its
# testing fakes, the examples' logic), and the lease simulator (`make sim-suite`).
# The mixed-version test (tests/tests/deployment/upgrades.rs) runs the previous release beside this
# build: scripts/build-release.sh builds it from the repository's history, once.
# The container tests (tests/tests/deployment/containers.rs, compose.rs) build the image from the
# dev binary with scripts/image.sh and run it with podman, which the first line installs.
# The test binaries run side by side (SUITE_JOBS at once), each to its end however many fail, so
# one failure hides no other; the run ends with a table of every step's wall time, and, when
# anything failed, with why each failing test failed and the state of the machine.
test: build guests
	@scripts/install-deps.sh --containers
	@scripts/test-suite.sh

# The inner loop, under 3 minutes after `make build`: the unit tests of every crate (the lease
# core, the host, the harness), the store conformance suite and the simulator's quick sweep.
test-fast: build
	$(CARGO) test --workspace --exclude leasehold-sim --lib
	$(CARGO) test -p leasehold-tests --test leases -- store_conformance
	$(MAKE) --no-print-directory sim SEEDS=2000

# The lease simulator (crates/sim; README, "Proof by simulation"):
#   make sim                       SEEDS seeds from FROM (20,000 from 0: what CI runs); the last
#                                  line says seeds run, violations and seeds per second
#   make sim SEEDS=1000000         the nightly run
#   make sim SEED=N [PLANT=BUG]    replays one seed: its event log, then its hash on the last line
#   make sim MUTANTS=all           plants each bug in turn; fails unless each is caught within
#                                  MUTANT_SEEDS seeds
SEEDS ?= 20000
FROM ?= 0
MUTANT_SEEDS ?= 2000
# The simulator builds in target/ beside the host and the tests: its fault points give the lease
# crates (and sqlx, through them) builds of their own, and every other dependency is the one the
# test build made: after it, 13 crates and 149 s of CPU, where a target directory of its own took
# ~300 s from nothing (in `make test`, a third of the simulator's CPU).
SIM = $(CARGO) run --quiet -p leasehold-sim --
sim:
	$(CARGO) test --quiet -p leasehold-sim
	@if [ -n "$(SEED)" ]; then $(SIM) --seed $(SEED) $(if $(PLANT),--plant $(PLANT)); \
	elif [ -n "$(MUTANTS)" ]; then $(SIM) --mutants $(MUTANTS) --seeds $(MUTANT_SEEDS) --from $(FROM); \
	else $(SIM) --seeds $(SEEDS) --from $(FROM); fi

# What `make test` runs of the simulator: the sweep, then every planted bug, both to the end.
sim-suite:
	@failed=0; \
	$(MAKE) --no-print-directory sim || failed=1; \
	$(MAKE) --no-print-directory sim MUTANTS=all || failed=1; \
	exit $$failed

# Figures: handoff, failover and plugin activation between real processes on PostgreSQL (and
# the handoff between processes on one SQLite file, beside it), the
# plugin runtime's compile, load, instantiate, call and loss-to-stop costs, the same figures per
# guest language (one plugin written in Rust, Python and JavaScript) as one table, fenced writes, and
# frozen holders (guest calls after the deadline, resume -> term ended), and the host's peak RSS
# under the attacks on its memory against its plugins' budget; what 1,000 and 10,000 leases on
# three replicas cost the holder, the standbys and PostgreSQL, and an idle host's CPU and memory;
# how lease groups rebalance (join, SIGTERM, kill: time, shards moved, longest unheld) and what
# 10,000 shards in groups over five replicas cost; renewals of 1,000 shards with and without
# hundreds of clients flooding /status, / and /metrics, on SQLite and PostgreSQL; the lease API's watch
# streams (term start/end to the event at its client, memory and CPU per watcher); a database outage
# behind a proxy that accepts and closes (warnings, failed campaigns a second, restart to leader); renewal p99
# of 1,000 shards with trace export off, exporting, and exporting to a collector that never answers; the image under podman: `podman run` to
# leading, and the handoff between containers beside the same between processes.
# handoff-bench also runs the same handoff and failover trials with etcd's own lock CLI
# (`etcdctl lock --ttl`, a single-node etcd it starts itself) and prints both side by side, and
# exec-bench the kill and freeze of `leasehold exec`'s host beside the same of etcdctl's;
# scripts/install-deps.sh --bench installs etcd if it is missing (BENCH_ETCD=0 skips it).
BENCHES := handoff-bench exec-bench plugin-bench lang-bench fence-bench freeze-bench memory-bench scale-bench group-bench flood-bench watch-bench outage-bench otel-bench container-bench
bench: build guests
	@scripts/install-deps.sh --bench --containers
	$(CARGO) build -p leasehold-bench
	@for b in $(BENCHES); do RUST_BACKTRACE=0 target/debug/$$b || exit 1; done

# The same figures from the release build, as examples/docker/Dockerfile ships it, with the
# harnesses built the same way so that their own work takes as little as possible from the two
# cores they measure on. The README's figures come from here; the first build takes ~20 minutes.
bench-release: guests
	@scripts/install-deps.sh --bench --containers
	$(CARGO) build --release -p leasehold -p leasehold-bench
	@for b in $(BENCHES); do RUST_BACKTRACE=0 target/release/$$b || exit 1; done

# The fault suite in full: black-hole partitions, PostgreSQL restarts, primary failover, clock
# jumps and a slow database, 20 trials each against real hosts, judged from the recorded history
# (`tests/tests/leases/chaos.rs` runs 2 of each in `make test`). CHAOS_TRIALS, CHAOS_TTL and
# CHAOS_FAULT (a substring of a fault's name) change the run. About half an hour on two cores.
chaos: build guests
	$(CARGO) build -p leasehold-bench --bin chaos
	RUST_BACKTRACE=0 target/debug/chaos

# The guest SDK, example plugins and test plugins, as components in guests/dist/ (NAME.wasm with
# its NAME.toml manifest). Picks a wasm32-wasip2 toolchain itself (scripts/cargo-wasm.sh).
guests: deps
	scripts/build-guests.sh

# docs/page.png, the README's picture of the live page: the browser test of a real handoff
# between two hosts on PostgreSQL (a plugin running on the new holder) saves its page there.
screenshot: build guests
	mkdir -p docs
	LEASEHOLD_PAGE_SCREENSHOT=$(CURDIR)/docs/page.png $(CARGO) test -p leasehold-tests --test http -- --exact page::the_page_shows_the_new_holder_epoch_and_why_within_2_s_of_a_real_handoff --nocapture

# The image operators run: examples/docker/Dockerfile, tagged leasehold:latest and
# leasehold:VERSION, with podman (installed if missing). Where no registry is reachable it makes
# the Debian base from Debian's packages and builds the release binary here (~20 minutes from
# clean) for the Dockerfile's runtime stage; it says which path it took and prints the size.
image:
	scripts/image.sh

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --workspace --no-deps --document-private-items

fmt:
	$(CARGO) fmt --all

clean:
	$(CARGO) clean
	rm -f leasehold.db leasehold.db-shm leasehold.db-wal leasehold.db-events
