# pulselb: one image for every role (controller, prober, proxy, proxy-init, check).
#
#   docker build -t ghcr.io/pulselb/pulselb:dev .
#   docker buildx build --platform linux/amd64,linux/arm64,linux/arm/v7 \
#     --build-arg VERSION=0.2.0 --build-arg COMMIT=$(git rev-parse HEAD) -t REGISTRY/pulselb:0.2.0 .
#
# `make release` builds the same images (and the binaries) without a container daemon, reproducibly;
# this file is for those who build with Docker. The build stage runs on the build machine's platform
# and cross-compiles for the target's (GOARCH=$TARGETARCH, GOARM from $TARGETVARIANT), so no
# emulation is needed; the binary is static (CGO_ENABLED=0, `make image-binary`, which test/deploy
# also runs and checks). VERSION and COMMIT are what `pulselb version` prints: the build context has
# no .git, so pass them.
# The runtime stage is Debian slim rather than distroless because the proxy drives the iptables
# binary (coreos/go-iptables); everything else needs only the binary. It is pulled for the target
# platform, so each image carries its architecture's Debian 12 iptables.
# The image runs as 65532 by default: the controller and the prober need no privileges. The proxy's
# NET_ADMIN and proxy-init's privileged mode (and the root user they need) come from the proxy pod
# spec, not from the image.

FROM --platform=$BUILDPLATFORM golang:1.26.8-bookworm AS build
ARG TARGETOS TARGETARCH TARGETVARIANT
ARG VERSION=dev
ARG COMMIT=unknown
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# make image-binary reads GOOS and GOARCH, GOARM from TARGETVARIANT (v7 -> 7), VERSION and COMMIT.
ENV GOOS=$TARGETOS GOARCH=$TARGETARCH TARGETVARIANT=$TARGETVARIANT VERSION=$VERSION COMMIT=$COMMIT
RUN make image-binary IMAGE_BINARY=/out/pulselb

FROM debian:12-slim
ARG VERSION=dev
ARG COMMIT=unknown
LABEL org.opencontainers.image.title=pulselb \
      org.opencontainers.image.source=https://github.com/pulselb/pulselb \
      org.opencontainers.image.version=$VERSION \
      org.opencontainers.image.revision=$COMMIT
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends iptables \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/pulselb /pulselb
USER 65532:65532
ENTRYPOINT ["/pulselb"]
