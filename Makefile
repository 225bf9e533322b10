# attnserve: `make serve` serves every shipped model (models/), `make test` runs the whole suite.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
MODEL_REPOSITORY ?= models
MODEL_DIR ?= models/g2p-en
# The model of requests that name none (models/ holds g2p-en and g2p-en-stress).
DEFAULT_MODEL ?= g2p-en
PROTO := protos/attnserve/v1/attnserve.proto
# The Open Inference Protocol (KServe v2 / Triton) service, served beside the native API.
KSERVE_PROTO := protos/attnserve/inference/grpc_service.proto
# Generated into the package (gitignored); a `pip install` generates them too (setup.py).
GEN := attnserve/v1/attnserve_pb2.py
# The C++ load generator of `make overload` and `make bench` (bench/cpp/loadgen.cc).
LOADGEN := build/attnserve-loadgen
# MLServer, the peer server `make bench` measures beside attnserve, in a virtual environment of its own.
MLSERVER_VENV := build/mlserver-venv
BENTOML_VENV := build/bentoml-venv

.PHONY: serve test install-serve install-dev protos train export quantize bench evaluate report clean

# --model-poll-s: a new version directory (models/<name>/<n>/), or a new model directory, copied in
# while the server runs is verified and served within that many seconds, without a restart.
MODEL_POLL_S ?= 5
serve: $(VENV)/.serve-installed
	$(VENV)/bin/attnserve-server --model-repository $(MODEL_REPOSITORY) --default-model "$(DEFAULT_MODEL)" --model-poll-s $(MODEL_POLL_S)

test: system-deps $(VENV)/.dev-installed
	$(PY) -m pytest -q -n auto --dist loadfile

# Debian packages the tests run: a real Prometheus (tests/server/test_prometheus.py), headless Chromium
# with its chromedriver (tests/transport/test_page.py, the attention page), the Noto fonts, so that the page
# and the client's PNG heat maps draw every script of the models (Armenian, Georgian, Hangul,
# Hiragana, Khmer; DejaVu covers Latin, Greek, Cyrillic and IPA), and espeak-ng, which phonemizer
# runs where tests/client/test_phonemize.py compares output shapes. Installed only when missing; the
# package lists are refreshed only if the first install attempt fails.
SYSTEM_DEPS := prometheus chromium chromium-driver fonts-noto-core fonts-noto-cjk espeak-ng
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
APT_INSTALL := DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q --no-install-recommends
.PHONY: system-deps
system-deps:
	@{ command -v prometheus && command -v chromium && command -v chromedriver && command -v espeak-ng && \
	   fc-list | grep -q "Noto Sans Khmer" && fc-list | grep -q "Noto Sans CJK"; } >/dev/null || \
	  $(APT_INSTALL) $(SYSTEM_DEPS) || { $(SUDO) apt-get update -q && $(APT_INSTALL) $(SYSTEM_DEPS); }

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

# Generated code comes from grpcio-tools, never edited by hand.
$(GEN): $(PROTO) $(KSERVE_PROTO) $(VENV)/bin/python
	$(PIP) install -q grpcio-tools==1.85.1
	mkdir -p attnserve/v1 attnserve/inference
	$(PY) -m grpc_tools.protoc -Iprotos --python_out=. --pyi_out=. --grpc_python_out=. $(PROTO) $(KSERVE_PROTO)
	touch attnserve/v1/__init__.py attnserve/inference/__init__.py

protos: $(GEN)

$(VENV)/.serve-installed: pyproject.toml $(GEN)
	$(PIP) install -q -e ".[serve,languages]"
	touch $@

$(VENV)/.dev-installed: pyproject.toml $(GEN)
	$(PIP) install -q -e ".[dev]"
	touch $@ $(VENV)/.serve-installed

install-serve: $(VENV)/.serve-installed
install-dev: $(VENV)/.dev-installed

# Reproduces the shipped model: two python -m training.train runs, the second continuing the
# first with a decaying learning rate. On one H200 GPU about 11 minutes in all (the shipped run);
# on 2 CPU cores about 6 minutes an epoch, 29 epochs (TRAIN_DEVICE=cpu, or auto: the GPU if any).
TRAIN_DEVICE ?= auto
G2P_MODEL = --hidden-size 512 --enc-layers 2 --dec-layers 1 --emb-dim 128 --attention additive --dropout 0.3
train: $(VENV)/.dev-installed
	$(PY) -m training.train --corpus cmudict --out runs/g2p-en-gpu/stage1 $(G2P_MODEL) --batch-size 256 \
	  --lr 2e-3 --epoch-lr-decay 0.97 --lr-decay 0.5 --min-lr 2e-5 --patience-epochs 10 --max-epochs 15 \
	  --seed 1 --device $(TRAIN_DEVICE)
	$(PY) -m training.train --corpus cmudict --out runs/g2p-en-gpu/stage2 --init-from runs/g2p-en-gpu/stage1/best.pt \
	  --batch-size 256 --lr 1e-3 --epoch-lr-decay 0.85 --lr-decay 0.5 --min-lr 1e-5 --patience-epochs 10 \
	  --max-epochs 14 --seed 1 --device $(TRAIN_DEVICE)

# The second model, ARPAbet with stress (AH0, EY1): the shipped model's two stages on the same corpus
# and split with CMUdict's stress digits kept (`make train-stress`, for a GPU machine). The shipped
# models/g2p-en-stress/1 came from `make train-stress-cpu` (below) on 2 CPU cores, then
#   make export EXPORT_CHECKPOINTS=runs/g2p-en-stress-cpu/best.pt MODEL_DIR=models/g2p-en-stress
#   make quantize MODEL_DIR=models/g2p-en-stress
# and `attnserve-eval --bundle models/g2p-en-stress/1` reports WER/PER with stress and stress-stripped.
.PHONY: train-stress train-stress-cpu
train-stress: $(VENV)/.dev-installed
	$(PY) -m training.train --corpus cmudict --keep-stress --out runs/g2p-en-stress/stage1 $(G2P_MODEL) \
	  --batch-size 256 --lr 2e-3 --epoch-lr-decay 0.97 --lr-decay 0.5 --min-lr 2e-5 --patience-epochs 10 \
	  --max-epochs 15 --seed 1 --device $(TRAIN_DEVICE)
	$(PY) -m training.train --corpus cmudict --keep-stress --out runs/g2p-en-stress/stage2 \
	  --init-from runs/g2p-en-stress/stage1/best.pt --batch-size 256 --lr 1e-3 --epoch-lr-decay 0.85 --lr-decay 0.5 \
	  --min-lr 1e-5 --patience-epochs 10 --max-epochs 14 --seed 1 --device $(TRAIN_DEVICE)

# The configuration that fits 2 CPU cores in the background (the shipped g2p-en-stress/1): a 384-wide
# model, one stage, a 100-minute budget. `make train-stress` is the full recipe for a GPU machine.
STRESS_CPU_MODEL = --hidden-size 384 --enc-layers 2 --dec-layers 1 --emb-dim 128 --attention additive --dropout 0.3
train-stress-cpu: $(VENV)/.dev-installed
	$(PY) -m training.train --corpus cmudict --keep-stress --out runs/g2p-en-stress-cpu $(STRESS_CPU_MODEL) \
	  --batch-size 256 --lr 2e-3 --epoch-lr-decay 0.93 --lr-decay 0.5 --min-lr 2e-5 --patience-epochs 8 \
	  --max-epochs 60 --max-minutes 100 --seed 1 --threads 2 --device cpu

# The frontier's models (docs/models.md; `make bench` measures every one: docs/performance.md), each
# trained on 2 CPU cores in the background, then exported and quantized like the others:
#   make export EXPORT_CHECKPOINTS=runs/g2p-en-gru/best.pt MODEL_DIR=bench/models/g2p-en-gru (a peer, not served)
# g2p-en's own architecture (its checkpoint20.npz: a 1-layer GRU encoder-decoder, 256-dim embeddings
# and states, no attention, the encoder's last state as the decoder's first), on our corpus and split.
.PHONY: train-g2p-en-gru train-compact frontier-ensemble
G2P_EN_GRU_MODEL = --cell gru --bidirectional false --enc-layers 1 --dec-layers 1 --emb-dim 256 --hidden-size 256 \
  --attention none --context init --dropout 0.2
train-g2p-en-gru: $(VENV)/.dev-installed
	$(PY) -m training.train --corpus cmudict --out runs/g2p-en-gru $(G2P_EN_GRU_MODEL) --batch-size 256 --lr 2e-3 \
	  --epoch-lr-decay 0.93 --lr-decay 0.5 --min-lr 2e-5 --patience-epochs 6 --max-epochs 60 --max-minutes 40 \
	  --seed 1 --threads 1 --device cpu
# A compact model (1.50 M parameters: 2x256 biLSTM, additive attention, 48-dim embeddings), trained on
# the references plus 40,000 frequent English words CMUdict lacks, labelled by the shipped model with
# beam 5 (training/distill.py --keep-references --unlabeled-wordfreq; Sun et al. 2019).
COMPACT_MODEL = --hidden-size 256 --enc-layers 2 --dec-layers 1 --emb-dim 48 --attention additive --dropout 0.25
train-compact: $(VENV)/.dev-installed
	$(PY) -m training.distill --bundle models/g2p-en/1 --keep-references --unlabeled-wordfreq 40000 --beam-size 5 \
	  --out runs/compact/train.tsv
	$(PY) -m training.train --corpus cmudict --train-targets runs/compact/train.tsv --out runs/compact/model \
	  $(COMPACT_MODEL) --batch-size 256 --lr 2e-3 --epoch-lr-decay 0.93 --lr-decay 0.5 --min-lr 2e-5 \
	  --patience-epochs 8 --max-epochs 80 --max-minutes 85 --seed 1 --threads 1 --device cpu
# The frontier's ensemble, not shipped (it is the two members' sum): the shipped model and the compact one,
# from their training runs (bundles hold no checkpoint: `make train` and `make train-compact` write these).
frontier-ensemble: $(VENV)/.dev-installed
	$(PY) -m training.export --checkpoint runs/g2p-en-gpu/stage2/best.pt runs/compact/model/best.pt \
	  --out build/frontier/ensemble/1

# SIGMORPHON 2021 Task 1 (data/sigmorphon-2021/): a model per language on the task's own splits, each
# trained on one CPU core in the background, exported, quantized and scored (experiments/sigmorphon/);
# what is done is kept, so it resumes. Table: docs/sigmorphon.md. SIGMORPHON_LANGS="fre bul": only those.
# SIGMORPHON_JOBS=2: two drivers, one a core, sharing out the languages (each passes over those the
# other is building).
SIGMORPHON_LANGS ?=
SIGMORPHON_JOBS ?= 1
.PHONY: sigmorphon
sigmorphon: $(VENV)/.dev-installed
	seq $(SIGMORPHON_JOBS) | xargs -P $(SIGMORPHON_JOBS) -I{} nice -n 10 $(PY) -m experiments.sigmorphon build \
	  $(if $(SIGMORPHON_LANGS),--langs $(SIGMORPHON_LANGS))

# The low languages again, each pretrained on the task's other languages first: not under the subtask's rules,
# a row of its own in docs/sigmorphon.md (experiments/sigmorphon/transfer.py); models in models-transfer/.
.PHONY: sigmorphon-transfer
sigmorphon-transfer: $(VENV)/.dev-installed
	seq $(SIGMORPHON_JOBS) | xargs -P $(SIGMORPHON_JOBS) -I{} nice -n 10 $(PY) -m experiments.sigmorphon transfer \
	  $(if $(SIGMORPHON_LANGS),--langs $(SIGMORPHON_LANGS))

# Each bundle whose language has WikiPron's frequent words (data/wikipron/, written by
# scripts/wikipron_lexicons.py) gets its lexicon.tsv again: the task's train and dev words, then those.
.PHONY: lexicons
lexicons: $(VENV)/.dev-installed
	$(PY) -m training.lexicon --wikipron-in $(MODEL_REPOSITORY)

# Several checkpoints export their ensemble (training/ensemble.py), e.g.
#   make export EXPORT_CHECKPOINTS="runs/seed1/best.pt runs/seed2/best.pt" MODEL_VERSION=2
EXPORT_CHECKPOINTS ?= runs/g2p-en-gpu/stage2/best.pt
MODEL_VERSION ?= 1
export: $(VENV)/.dev-installed
	$(PY) -m training.export --checkpoint $(EXPORT_CHECKPOINTS) --out $(MODEL_DIR)/$(MODEL_VERSION)

# Adds int8 graphs (per-row activation scales: answers independent of the batch, training/rowwise_int8.py)
# to the bundle, with their WER/PER and the batch-independence check --precision auto reads.
quantize: $(VENV)/.dev-installed
	$(PY) -m training.quantize --bundle $(MODEL_DIR)/$(MODEL_VERSION)

# The serving benchmark (not a test): results in bench/results/ (JSON, markdown, PNG). Beside attnserve it
# runs MLServer and BentoML (bench/servers.py), each from its own virtual environment, and wrk (Debian's)
# for the REST points.
bench: $(VENV)/.dev-installed $(LOADGEN) $(MLSERVER_VENV)/.installed $(BENTOML_VENV)/.installed
	@command -v wrk >/dev/null || $(APT_INSTALL) wrk || { $(SUDO) apt-get update -q && $(APT_INSTALL) wrk; }
	$(PIP) install -q -e ".[dev,bench]"
	$(PY) -m bench.run --bundle $(MODEL_DIR)/$(MODEL_VERSION) --loadgen $(LOADGEN)

# A peer's virtual environment of its own with one pyproject extra's requirements: $(call peer_venv,DIR,EXTRA).
# Not attnserve itself, whose dependencies pin protobuf 7: the peer imports service/ from the checkout
# (PYTHONPATH, bench/peer_servers.py).
define peer_venv
	$(PYTHON) -m venv $(1)
	$(1)/bin/pip install -q --upgrade pip
	$(1)/bin/python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['optional-dependencies']['$(2)']))" > $(1)/requirements.txt
	$(1)/bin/pip install -q -r $(1)/requirements.txt
	touch $(1)/.installed
endef
# MLServer, the peer of `make bench`: pyproject's [mlserver] extra, since MLServer 1.7.1 needs
# protobuf < 7 and attnserve's dependencies pin 7.
.PHONY: mlserver-venv
mlserver-venv: $(MLSERVER_VENV)/.installed
$(MLSERVER_VENV)/.installed: pyproject.toml
	$(call peer_venv,$(MLSERVER_VENV),mlserver)
# BentoML, the second peer: pyproject's [bentoml] extra, its many dependencies kept out of .venv.
.PHONY: bentoml-venv
bentoml-venv: $(BENTOML_VENV)/.installed
$(BENTOML_VENV)/.installed: pyproject.toml
	$(call peer_venv,$(BENTOML_VENV),bentoml)

# Not part of `make bench` (its own server and peers): running English text (bench/corpus/english.txt) through
# the text call, sentence per call at concurrency 16 with the C++ load generator, beside espeak-ng through
# phonemizer and gruut in process. Results in bench/results/text.{json,md}.
BENCH_TEXT_DEPS := espeak-ng
.PHONY: bench-text
bench-text: $(VENV)/.dev-installed $(LOADGEN)
	@command -v espeak-ng >/dev/null || $(APT_INSTALL) $(BENCH_TEXT_DEPS) || \
	  { $(SUDO) apt-get update -q && $(APT_INSTALL) $(BENCH_TEXT_DEPS); }
	$(PIP) install -q -e ".[dev,bench]"
	$(PY) -m bench.text --bundle $(MODEL_DIR) --loadgen $(LOADGEN)

# Every model variant, each trained for the same minutes from the same seed, exported with the parity
# check and measured through the ONNX engine, beside g2p-en and published results: docs/RESULTS.md.
# 11 variants: REPORT_MINUTES=10 takes about 2.5 hours on 2 cores.
REPORT_MINUTES ?= 10
report: $(VENV)/.dev-installed
	$(PIP) install -q -e ".[dev,bench]"
	$(PY) -m training.report --minutes-per-variant $(REPORT_MINUTES)

# Not part of `make test`: goodput of the real server offered 1x, 3x and 10x its capacity (bench/overload.py),
# with a C++ load generator (bench/cpp/loadgen.cc) built against Debian's libgrpc++-dev, so that the client's
# CPU stays small beside the server's. Results in bench/results/overload.{json,md}.
OVERLOAD_DEPS := g++ make pkg-config libgrpc++-dev
$(LOADGEN): bench/cpp/loadgen.cc bench/cpp/Makefile
	@pkg-config --exists grpc++ || $(APT_INSTALL) $(OVERLOAD_DEPS) || \
	  { $(SUDO) apt-get update -q && $(APT_INSTALL) $(OVERLOAD_DEPS); }
	mkdir -p build
	$(MAKE) -C bench/cpp BIN=$(abspath $(LOADGEN))
.PHONY: overload
overload: $(VENV)/.dev-installed $(LOADGEN)
	$(PY) -m bench.overload --bundle $(MODEL_DIR)/$(MODEL_VERSION) --loadgen $(LOADGEN)

# Not part of `make test`: a real server under steady varied load for SOAK_SECONDS (default 10 minutes);
# prints requests served, errors (must be 0) and the server's RSS at start and end. scripts/soak.py --help.
SOAK_SECONDS ?= 600
.PHONY: soak
soak: $(VENV)/.serve-installed
	$(PY) scripts/soak.py --model-dir $(MODEL_DIR) --seconds $(SOAK_SECONDS)

# The real image, also run by `make test` (tests/deploy/test_container.py; about 3.3 minutes cold on 2 cores, 20 s
# warm): builds deploy/Dockerfile with Debian's podman on a Debian base debootstrapped from the machine's
# own mirror (no registry needed; cached in build/container/), runs it read-only as uid 10001 and checks
# it from outside: gRPC health, a Transduce with attention, /metrics, SIGTERM mid-burst (no call lost,
# exit 0). Needs root; installs podman, runc and debootstrap when missing. Summary: build/container-check.json.
# CONTAINER_CHECK_ARGS="--no-cache" (every step rebuilt), "--git-ref HEAD", ...: scripts/container_check.py --help.
CONTAINER_CHECK_ARGS ?=
.PHONY: container-check
container-check: $(VENV)/.serve-installed
	$(SUDO) $(PY) scripts/container_check.py $(CONTAINER_CHECK_ARGS)

# Test-split WER/PER through a running server (start one with `make serve`).
evaluate: $(VENV)/.dev-installed
	$(VENV)/bin/attnserve-eval --server localhost:50051 --split test

clean:
	rm -rf $(VENV) attnserve/v1 attnserve/inference build .pytest_cache
