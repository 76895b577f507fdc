// Package browser holds tests that load pulselb's dashboard in headless
// Chromium (Debian package chromium) and assert on the rendered page. They
// skip when /usr/bin/chromium is missing, unless CI=true, when they fail.
// Screenshots go to $PULSELB_ARTIFACTS, default test/browser/artifacts/.
package browser
