# pulselb: one image for every role (controller, prober, proxy, proxy-init, check).
#
#   docker build -t ghcr.io/pulselb/pulselb:dev .
#
# The binary is static (CGO_ENABLED=0, built by `make image-binary`, which
# test/deploy also runs and checks). The runtime stage is Debian slim rather
# than distroless because the proxy drives the iptables binary
# (coreos/go-iptables); everything else needs only the binary.
# The image runs as 65532 by default: the controller and the prober need no
# privileges. The proxy's NET_ADMIN and proxy-init's privileged mode (and the
# root user they need) come from the proxy pod spec, not from the image.

FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN make image-binary IMAGE_BINARY=/out/pulselb

FROM debian:12-slim
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends iptables \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/pulselb /pulselb
USER 65532:65532
ENTRYPOINT ["/pulselb"]
