# Everyday tasks. `make install` once, then `make run` or `make testnet`.
PYTHON ?= python3
N ?= 5
SHAPE ?= line
DEGREE ?= 3
KEYS := configs/keys/node1.pem configs/keys/node2.pem configs/keys/node3.pem

.PHONY: install test test-all run run3 testnet bench bench-sim clean

install:
	$(PYTHON) -m pip install -e '.[test]'

test:
	$(PYTHON) -m pytest -q -m "not slow"

test-all:
	$(PYTHON) -m pytest -q

configs/keys/%.pem:
	@mkdir -p configs/keys
	axl-node genkey $@ >/dev/null

# One node with the first config (listens on tls://127.0.0.1:9001, bridge on :9002).
run: $(KEYS)
	axl-node --config configs/node1.json

# The three configs of configs/ in one terminal; Ctrl-C stops all three.
run3: $(KEYS)
	@axl-node --config configs/node1.json & one=$$!; sleep 1; \
	axl-node --config configs/node2.json & two=$$!; \
	axl-node --config configs/node3.json & three=$$!; \
	trap 'kill $$one $$two $$three 2>/dev/null' INT TERM; \
	wait

# N nodes on loopback (SHAPE line|star|ring|random, DEGREE for random); the node
# list goes to .axl-testnet/testnet.json, which every example reads.
testnet:
	axl-testnet -n $(N) --shape $(SHAPE) --degree $(DEGREE)

bench:
	$(PYTHON) -m axl.bench

bench-sim:
	$(PYTHON) -m axl.sim.bench

clean:
	rm -rf .axl-testnet .pytest_cache build *.egg-info

.PHONY: fuzz fuzz-api chaos soak

# Every decoder and state machine fed by the network, with 20,000 random and
# mutated inputs each instead of the suite's 200 (FUZZ_EXAMPLES=... to change).
FUZZ_EXAMPLES ?= 20000
fuzz:
	AXL_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(PYTHON) -m pytest -q tests/test_fuzz_*.py

# schemathesis against a live node for up to 5 minutes: no 500s, no undocumented answers.
fuzz-api:
	$(PYTHON) -m axl.chaos fuzz-api --max-examples 200 --max-time 300

# Relays killed and links cut under load for 5 minutes; fails on any lost acknowledged message.
chaos:
	$(PYTHON) -m axl.chaos chaos --duration 300

# 10 minutes of steady traffic on 5 nodes; RSS and open fds sampled each minute.
soak:
	$(PYTHON) -m axl.chaos soak --duration 600 --interval 60
