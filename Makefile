# Everyday tasks. `make install` once (it makes the project virtualenv .venv),
# then `make run3` or `make testnet`. Every target runs the tools from .venv
# (or from the virtualenv that is active), so nothing goes into the system Python.
PYTHON ?= python3
VENV ?= $(or $(VIRTUAL_ENV),.venv)
# Extra arguments for `python3 -m venv` and `pip install` (e.g. offline installs).
VENV_ARGS ?=
PIP_ARGS ?=
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
N ?= 5
SHAPE ?= line
DEGREE ?= 3
# Link types cycled over the testnet's edges: tls, tcp, quic, ws, unix (e.g. LINKS=tls,quic,ws).
LINKS ?= tls
KEYS := configs/keys/node1.pem configs/keys/node2.pem configs/keys/node3.pem
CONFIGS := configs/node1.json configs/node2.json configs/node3.json

.PHONY: install compile test run run3 testnet bench bench-go bench-sim bench-instructions wan interop clean

install:
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
		{ echo "make install: AXL needs Python 3.11 or newer; $(PYTHON) is $$($(PYTHON) -V 2>&1)" >&2; exit 1; }
	@test -x $(PY) || $(PYTHON) -c 'import ensurepip, venv' 2>/dev/null || \
		{ echo "make install: $(PYTHON) cannot make a virtualenv (no ensurepip); on Debian/Ubuntu run: apt-get install python3-venv" >&2; exit 1; }
	@test -x $(PY) || $(PYTHON) -m venv $(VENV_ARGS) $(VENV)
	$(PY) -m pip install $(PIP_ARGS) -e '.[test,compile]'
	@$(COMPILE) || echo "make install: installed without the compiled build (see above)"
	@echo "installed into $(VENV): $(BIN)/axl-node, $(BIN)/axl-testnet (or: . $(VENV)/bin/activate)"

# The compiled build (axl/compiled.py): the modules a message crosses, compiled
# with mypyc into build/compiled/. Without a C compiler it says so and the node
# runs as pure Python; a failed build does not stop `make install` either.
# AXL_BUILD=pure runs the Python modules even where the compiled build exists.
COMPILE = $(PY) -c 'import sys, axl.compiled; sys.exit(axl.compiled.main())'
compile: $(BIN)/axl-node
	@$(COMPILE)

# Every other target needs the virtualenv; say how to make it instead of failing obscurely.
$(BIN)/axl-node:
	@echo "make: $(VENV) is missing or incomplete; run 'make install' first" >&2; exit 1

test: $(BIN)/axl-node
	$(PY) -m pytest -q

configs/keys/%.pem: | $(BIN)/axl-node
	@mkdir -p configs/keys
	$(BIN)/axl-node genkey $@ >/dev/null

# One node with the first config (listens on tls://127.0.0.1:9001, bridge on :9002).
run: $(KEYS)
	$(BIN)/axl-node --config configs/node1.json

# The three configs of configs/ in one terminal, each log line prefixed with
# the node's name; Ctrl-C stops all three.
run3: $(KEYS)
	$(BIN)/axl-testnet --run $(CONFIGS)

# N nodes on loopback (SHAPE line|star|ring|random, DEGREE for random); the node
# list goes to .axl-testnet/testnet.json, which every example reads.
testnet: $(BIN)/axl-node
	$(BIN)/axl-testnet -n $(N) --shape $(SHAPE) --degree $(DEGREE) --links $(LINKS)

bench: $(BIN)/axl-node
	$(PY) -m axl.bench

# Two nodes far apart: their peering crosses a relay paced at 12.5 MB/s and
# delayed to 50 and 200 ms RTT; beside Go AXL, and ours sending to Go AXL, when AXL_GO_BIN_DIR has it.
wan: $(BIN)/axl-node
	$(PY) -m axl.bench.wan

# Our node and Go AXL (AXL_GO_BIN_DIR) on one probe, alternating: 1 KiB /send
# messages, the rate and each node's CPU per message.
bench-go: $(BIN)/axl-node
	$(PY) -m axl.bench.versus_go

# The node against the reference Go programs (yggdrasil, yggdrasilctl, Go AXL)
# in AXL_GO_BIN_DIR, by default ../shared/go-peers/bin (0.5.12) when it exists;
# the tests ask `yggdrasil -version` which release they face (.ci/run runs
# 0.5.12 and 0.5.14).
AXL_GO_BIN_DIR ?= $(if $(wildcard ../shared/go-peers/bin),$(abspath ../shared/go-peers/bin))
export AXL_GO_BIN_DIR
interop: $(BIN)/axl-node
	@test -n "$(AXL_GO_BIN_DIR)" || { echo "make interop: skipped: no Go reference programs (set AXL_GO_BIN_DIR to a folder with yggdrasil, yggdrasilctl and axl-node)"; exit 0; }; \
	$(PY) -m pytest -q -rs tests/interop

bench-sim: $(BIN)/axl-node
	$(PY) -m axl.sim.bench

# Instructions per message, counted by valgrind's callgrind (needs valgrind):
# for changes smaller than the spread of timings on a shared machine.
bench-instructions: $(BIN)/axl-node
	$(PY) -m axl.bench.instructions

clean:
	rm -rf .axl-testnet .pytest_cache build *.egg-info

.PHONY: fuzz fuzz-api chaos crash soak hostile

# Every decoder and state machine fed by the network or a local client, with
# 100,000 random and mutated inputs each instead of the suite's 200
# (FUZZ_EXAMPLES=... to change); each test's count of passing examples and
# its time are printed at the end (docs/security.md, "Fuzzing").
FUZZ_EXAMPLES ?= 100000
fuzz: $(BIN)/axl-node
	AXL_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(PY) -m pytest -q --hypothesis-show-statistics tests/test_fuzz_*.py

# schemathesis against a live node for up to 5 minutes: no 500s, no undocumented answers.
fuzz-api: $(BIN)/axl-node
	$(PY) -m axl.chaos fuzz-api --max-examples 200 --max-time 300

# Relays killed and links cut under load for 5 minutes; fails on any lost acknowledged message.
chaos: $(BIN)/axl-node
	$(PY) -m axl.chaos chaos --duration 300

# 10,000 messages of up to 1 KiB, then 200 of 16 MiB, then 60,000 of up to
# 1 KiB over /ws (commits of a hundred or more: row files), from 4 senders
# while the receiving node is SIGKILLed 3 times (the durable inbox), with
# inbox_sync normal and full; CRASH_ARGS=--no-streams sends as Go nodes do.
CRASH_ARGS ?=
crash: $(BIN)/axl-node
	for sync in normal full; do \
		$(PY) -m axl.chaos crash --messages 10000 --senders 4 --kills 3 --sync $$sync $(CRASH_ARGS) && \
		$(PY) -m axl.chaos crash --messages 200 --size 16MiB --senders 4 --kills 3 --sync $$sync $(CRASH_ARGS) && \
		$(PY) -m axl.chaos crash --messages 60000 --senders 4 --kills 3 --ws --sync $$sync $(CRASH_ARGS) \
		|| exit 1; \
	done

# 10 minutes of steady traffic on 5 nodes; RSS and open fds sampled each minute.
soak: $(BIN)/axl-node
	$(PY) -m axl.chaos soak --duration 600 --interval 60

# Three attacks on a node's budgets (a giant ws:// message, a window-ignoring
# MCP flood, pipelined requests never read): RSS growth and /health latency.
hostile: $(BIN)/axl-node
	$(PY) -m axl.chaos hostile
