# pulselb — build, test, lint, benchmark.
# Every tool is pinned; `make deps` installs the Debian packages the tests use.

GO            ?= go
GOLANGCI_LINT := github.com/golangci/golangci-lint/v2/cmd/golangci-lint@v2.15.0
COREDNS_BIN   ?= $(CURDIR)/bin/coredns-1.15.0
# Keep in step with api/v1alpha1/generate_test.go, which fails when generated files are stale.
CONTROLLER_GEN := sigs.k8s.io/controller-tools/cmd/controller-gen@v0.23.0
# Fuzz budgets are counts of inputs, not durations (about 20 s each on 2 cores): a duration ends in a
# race in Go 1.26's fuzz coordinator that can fail a clean run with "context deadline exceeded"
# (golang/go#75804, fixed in Go 1.27). Override with e.g. FUZZ_PARSE=30s.
FUZZ_PARSE    ?= 150000x
FUZZ_SERVER   ?= 40000x
FUZZ_CONFIG   ?= 25000x
FUZZ_SERIAL   ?= 30000x
DEBIAN_DEPS   := mariadb-server iproute2 iptables dnsutils prometheus-blackbox-exporter iperf3 haproxy nginx bind9 dnsperf nsd curl util-linux chromium runc containernetworking-plugins conntrack
# The conformance run's agnhost image takes its nc and wget from this machine's packages.
DEBIAN_DEPS   += netcat-openbsd wget
# The release: qemu runs its arm64 and armv7 binaries in release-check; its images take iptables of these
# Debian architectures (apt-get download, nothing installed).
DEBIAN_DEPS   += qemu-user-static
RELEASE_DEBIAN_ARCHS := arm64 armhf

.PHONY: release release-check release-reproducible release-prepare
.PHONY: conformance
.PHONY: all build generate manifests verify-manifests image-binary test unit fuzz e2e lint deps bench bench-prober bench-proxy bench-dns bench-failover bench-controller bench-planned bench-probers bench-scale soak clean

all: build

## VERSION and COMMIT stamp every binary (`pulselb version`): release.Describe decides them, the release
## tag at HEAD without its "v" (v0.2.0 -> 0.2.0), else "dev". The Dockerfile passes them as build arguments.
RELEASE   = $(GO) run ./release/cmd/pulselb-release
DESCRIBE  = $(shell $(RELEASE) describe 2>/dev/null)
VERSION  ?= $(or $(word 1,$(DESCRIBE)),dev)
COMMIT   ?= $(or $(word 2,$(DESCRIBE)),unknown)
# Keep in step with release.LDFlags, which `make release` uses.
VERSION_LDFLAGS = -X main.version=$(VERSION) -X main.commit=$(COMMIT)

build:
	$(GO) build -ldflags "$(VERSION_LDFLAGS)" -o bin/pulselb ./cmd/pulselb

## generate: deepcopy code and the CRD from api/ (pinned controller-gen).
generate:
	$(GO) run $(CONTROLLER_GEN) object paths=./api/... crd:crdVersions=v1 output:crd:artifacts:config=deploy/crds

## manifests: the kustomize base deploy/base and the chart's crds/ from the Helm chart deploy/helm/pulselb
## (the one source) and deploy/crds; run after changing either.
manifests:
	cd test && $(GO) run ./deploy/manifests

## verify-manifests: fail when deploy/base or the chart's crds/ differ from a fresh render.
verify-manifests:
	cd test && $(GO) run ./deploy/manifests -check

## image-binary: the static binary the container image ships; the Dockerfile runs this target,
## and test/deploy runs it and checks the result is static.
IMAGE_BINARY ?= bin/pulselb-static
## GOOS, GOARCH and GOARM (or Docker's TARGETVARIANT, v7) from the environment choose the platform: the
## Dockerfile cross-compiles.
image-binary:
	CGO_ENABLED=0 $(if $(TARGETVARIANT),GOARM=$(patsubst v%,%,$(TARGETVARIANT))) $(GO) build -trimpath -buildvcs=false -ldflags "-s -w $(VERSION_LDFLAGS)" -o $(IMAGE_BINARY) ./cmd/pulselb

## release: static binaries for linux/amd64, linux/arm64 and linux/arm/v7, each with its .sha256, and
## pulselb-image.tar, an OCI image layout holding one image index with an image per platform (each with
## Debian 12's iptables of its platform), into DIST; built from the commit RELEASE_REV's tree, never the
## working tree, without a container daemon. Root on Debian 12 (make deps adds the foreign architectures).
## Push the index with `skopeo copy --all oci-archive:dist/pulselb-image.tar docker://REGISTRY/pulselb:TAG`.
## RELEASE_PLATFORMS limits release and release-check to some platforms (linux-amd64,linux-arm64,linux-armv7;
## empty: every one). `make test` sets linux-amd64,linux-arm64: the ARMv7 cross-compile, a whole compile of
## pulselb and its Kubernetes libraries, costs CI about 4 minutes cold, and the 32-bit ARM build is checked
## by `make release-check` and at each release.
DIST        ?= dist
RELEASE_REV ?= HEAD
RELEASE_PLATFORMS ?=
release: deps
	$(RELEASE) build -out $(DIST) -rev $(RELEASE_REV) -platforms '$(RELEASE_PLATFORMS)'

## release-check: the release, then its arm64 and armv7 (and amd64) binaries under qemu user-mode emulation
## and its image index checked platform by platform (release/release_test.go); part of `make test`, there for
## linux-amd64 and linux-arm64 only.
release-check: release
	PULSELB_RELEASE_DIR=$(abspath $(DIST)) PULSELB_RELEASE_PLATFORMS='$(RELEASE_PLATFORMS)' $(GO) test -count=1 -v -run '^(TestBinariesUnderQEMU|TestImageIndex)$$' ./release/

## release-reproducible: the release of RELEASE_REV built twice, the second time from another directory with
## an empty Go build cache; fails unless every file is the same byte for byte.
release-reproducible: deps
	rm -rf $(DIST)-1 $(DIST)-2
	$(RELEASE) build -out $(DIST)-1 -rev $(RELEASE_REV)
	cache=$$(mktemp -d) && GOCACHE=$$cache $(RELEASE) build -out $(DIST)-2 -rev $(RELEASE_REV); rc=$$?; rm -rf $$cache; exit $$rc
	cmp $(DIST)-1/SHA256SUMS $(DIST)-2/SHA256SUMS && cat $(DIST)-1/SHA256SUMS

## release-prepare VERSION=0.2.0: the chart's version and appVersion (and so deploy/base's image tags) set to
## VERSION, CHANGELOG.md's Unreleased section dated as VERSION; then commit and tag v0.2.0.
release-prepare:
	$(RELEASE) prepare -version $(VERSION)
	$(MAKE) manifests

## test: the whole suite — unit and real-server tests with the race detector, then bounded fuzzing.
test: RELEASE_PLATFORMS = linux-amd64,linux-arm64
test: deps unit release-check fuzz e2e

unit:
	$(GO) vet ./...
	cd test && $(GO) vet ./...
	@test -z "$$(gofmt -l .)" || { echo "gofmt needed:"; gofmt -l .; exit 1; }
	$(GO) test -race -count=1 -timeout 20m ./...

## `go test -fuzz` passes without fuzzing when the package has no such target, so each is checked first.
FUZZ_TARGETS := api/probespec:FuzzParse dnsexport:FuzzServer standalone:FuzzConfig dnsexport:FuzzSerialFile
fuzz:
	@for t in $(FUZZ_TARGETS); do grep -qs "^func $${t#*:}(" ./$${t%%:*}/*_test.go || { echo "fuzz: no $${t#*:} in ./$${t%%:*}/"; exit 1; }; done
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZ_PARSE) ./api/probespec/
	$(GO) test -run '^$$' -fuzz '^FuzzServer$$' -fuzztime $(FUZZ_SERVER) ./dnsexport/
	$(GO) test -run '^$$' -fuzz '^FuzzConfig$$' -fuzztime $(FUZZ_CONFIG) ./standalone/
	$(GO) test -run '^$$' -fuzz '^FuzzSerialFile$$' -fuzztime $(FUZZ_SERIAL) ./dnsexport/

## e2e: a real control plane built from k8s.io/kubernetes and simulated nodes in network namespaces
## (root; the first run builds test/.bin, about 15 minutes on 2 idle cores), including the install
## from deploy/base under pulselb's own ServiceAccounts (TestInstall, TestRBAC) and, on real kubelets,
## with the release's image index (TestKubeletInstall: hence `release`, which `make test` builds once
## for release-check and e2e both).
## Then the install manifests: rendered chart and base validated by the harness API server, and
## deploy/base up to date.
e2e: deps release
	test -x $(COREDNS_BIN)/coredns || GOBIN=$(COREDNS_BIN) $(GO) install github.com/coredns/coredns@v1.15.0
	$(MAKE) -C test e2e PULSELB_COREDNS=$(COREDNS_BIN)/coredns PULSELB_RELEASE_DIR=$(abspath $(DIST))
	cd test && PULSELB_TEST_BIN=$(CURDIR)/test/.bin $(GO) test -count=1 -timeout 20m -v ./deploy/

lint:
	$(GO) run $(GOLANGCI_LINT) run ./...

## conformance: Kubernetes' own [Feature:LoadBalancer] e2e specs (the upstream e2e.test of the harness'
## version, unmodified, provider skeleton) against pulselb from deploy/base on three real kubelet nodes,
## one spec at a time; docs/conformance.md. CONFORMANCE_FLAGS="-focus RE" runs some of them.
CONFORMANCE_FLAGS ?=
conformance: deps
	test -x $(COREDNS_BIN)/coredns || GOBIN=$(COREDNS_BIN) $(GO) install github.com/coredns/coredns@v1.15.0
	$(MAKE) -C test bin conformance-bin
	cd test && PULSELB_TEST_BIN=$(CURDIR)/test/.bin $(GO) run ./cmd/pulselb-conformance \
		-e2e .bin/conformance/e2e.test -kubectl .bin/conformance/kubectl -agnhost .bin/conformance/agnhost \
		-coredns $(COREDNS_BIN)/coredns $(CONFORMANCE_FLAGS)

## deps: Debian packages the tests and benchmarks need (installed when run as root, only if missing).
deps:
	@if [ "$$(id -u)" = 0 ]; then added=""; for a in $(RELEASE_DEBIAN_ARCHS); do \
		dpkg --print-foreign-architectures | grep -qx $$a || { dpkg --add-architecture $$a; added=1; }; done; \
		if [ -n "$$added" ]; then apt-get update -qq; fi; fi
	@if [ "$$(id -u)" != 0 ]; then echo "deps: not root, not installing $(DEBIAN_DEPS); tests that need them skip"; exit 0; fi; \
	missing=""; for p in $(DEBIAN_DEPS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi

## soak: the randomized fault soak (test/soak, docs/soak.md) for an hour on pulselb installed from deploy/base,
## with a random seed it prints first (root). SOAK_FLAGS="-seed N -duration 10m" replays or shortens a run.
SOAK_FLAGS ?=
soak: deps
	cd test && $(GO) run ./cmd/pulselb-soak $(SOAK_FLAGS)

## bench: pulselb against its anchors, side by side (root); results go to docs/benchmarks.md.
bench: bench-prober bench-proxy bench-dns bench-failover bench-controller bench-planned bench-probers bench-scale

## bench-prober: probes per CPU-second against blackbox_exporter; 10,000 targets.
bench-prober: deps
	cd test && $(GO) run ./bench/prober

## bench-proxy: proxy data plane against no proxy and HAProxy.
bench-proxy: deps
	cd test && $(GO) run ./bench/proxy

clean:
	rm -rf bin test/.bin $(DIST)

## bench-dns: dnsperf against pulselb, CoreDNS, BIND 9 and NSD serving the same zone.
bench-dns: deps
	test -x $(COREDNS_BIN)/coredns || GOBIN=$(COREDNS_BIN) $(GO) install github.com/coredns/coredns@v1.15.0
	cd test && $(GO) run ./bench/dns -coredns $(COREDNS_BIN)/coredns

## bench-failover: 20 node-blackhole trials against the readiness-only path, then 6 with deploy/base installed, half of them on the leader's node (root, ~9 minutes once built).
bench-failover: deps
	cd test && $(GO) run ./bench/failover

## bench-planned: requests lost per planned change (upgrade, maintenance, drains, scale-down, leader loss), pulselb against no drain delay (root, ~4 minutes once built).
bench-planned: deps
	cd test && $(GO) run ./bench/planned

## bench-probers: API writes and bytes of 1,000 probers' heartbeats, Leases against report heartbeats, in steady state and in a failover; controller CPU, agent memory (root, ~20 minutes).
bench-probers: deps
	cd test && $(GO) run ./bench/probers

## bench-controller: 2,000 LoadBalancer Services on 200 light nodes: time to every status, controller CPU and RSS, then the control plane alone for the same objects (root, ~15 minutes).
bench-controller: deps
	cd test && $(GO) run ./bench/controller && $(GO) run ./bench/controller -floor

## bench-scale: failover at 1,000 nodes and 2,000 Services (real probers at 1 s around each victim, cheap reports and Leases elsewhere) against 10 nodes and 20 Services, 10 blackhole trials each (root, ~20 minutes).
bench-scale: deps
	cd test && $(GO) run ./bench/scale
