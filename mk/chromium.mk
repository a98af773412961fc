# Debian's chromium, for the test that renders report.html headless and checks its screenshot
# (tests/unit/test_report_html.py; it skips when chromium is missing).
# Included from the main Makefile; works alone too (`make -f mk/chromium.mk chromium`).
#   chromium   nothing when chromium is on PATH; else, as root, installs Debian's package with
#              apt-get; else says what to install (and succeeds: the suite runs without it)

CHROMIUM     ?= chromium
CHROMIUM_PKG ?= chromium

.PHONY: chromium

chromium:
	@if command -v $(CHROMIUM) >/dev/null 2>&1; then \
	  echo "chromium: $$(command -v $(CHROMIUM))"; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $(CHROMIUM_PKG); } \
	    || echo "chromium could not be installed; the report screenshot test will skip"; \
	else \
	  echo "chromium is not installed; the report screenshot test will skip. As root on Debian:"; \
	  echo "  apt-get update && apt-get install -y --no-install-recommends $(CHROMIUM_PKG)"; \
	fi
