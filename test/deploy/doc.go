// Package deploy renders pulselb's Helm chart (deploy/helm/pulselb), the one
// source of the install manifests, and generates and checks the kustomize base
// (deploy/base) from it. Its tests validate the rendered objects against a
// real API server and check the base is up to date.
package deploy
