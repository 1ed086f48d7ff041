# hcclD: one Makefile, every library through pkg-config, all output under build/.
#   make [all] | test | test-rdma | test-tsan | demo | bench | bench-determinism | clean
#   make install [PREFIX=/usr/local DESTDIR= PYDIR=]
#   make test SANITIZE=address,undefined

SANITIZE ?=
comma    := ,
# Instrumented builds live beside the plain one so that neither rebuilds the other.
ifeq ($(SANITIZE),)
BUILD    ?= build
else
BUILD    ?= build/sanitize-$(subst $(comma),-,$(SANITIZE))
endif
PREFIX   ?= /usr/local
# Where Debian's python3 finds packages installed under PREFIX (/usr/local/lib/python3.X/...).
PYVER    := $(shell /usr/bin/python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
PYDIR    ?= $(PREFIX)/lib/python$(or $(PYVER),3)/dist-packages
VERSION  := 0.1.0

PKGS_CORE   := libuv libprotobuf-c hwloc libsystemd inih libsodium jansson libibverbs librdmacm \
               libmicrohttpd
PKGS_CLIENT := libprotobuf-c jansson libsodium
PKGS_TEST   := check

.DEFAULT_GOAL := all

# Missing tools or libraries: install them (Debian packages only) before anything else.
DEPS_STAMP := $(BUILD)/.deps-ok
$(DEPS_STAMP): scripts/install-deps.sh
	@if ! command -v protoc-c >/dev/null 2>&1 || ! command -v pkg-config >/dev/null 2>&1 || \
	    ! command -v clang-format >/dev/null 2>&1 || ! command -v systemd-analyze >/dev/null 2>&1 || \
	    ! [ -e "$$(clang -print-runtime-dir 2>/dev/null)/libclang_rt.fuzzer-x86_64.a" ] || \
	    ! /usr/bin/python3 -c 'import numpy, torch' 2>/dev/null || \
	    ! dpkg -s libopenblas0-serial >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1 || \
	    ! command -v gnuplot >/dev/null 2>&1 || \
	    ! pkg-config --exists $(PKGS_CORE) $(PKGS_TEST); then \
	    echo "hcclD: installing missing dependencies (scripts/install-deps.sh)"; \
	    ./scripts/install-deps.sh; fi
	@mkdir -p $(@D) && touch $@

ifneq ($(MAKECMDGOALS),clean)
pc_cflags = $(shell pkg-config --cflags $(1) 2>/dev/null)
pc_libs   = $(shell pkg-config --libs $(1) 2>/dev/null)
endif

OPT      ?= -O2
WARN     := -Wall -Wextra -Wno-unused-parameter -Wshadow -Wstrict-prototypes
CFLAGS   ?= $(OPT) -g
ALLCFLAGS = $(CFLAGS) $(WARN) -std=gnu11 -fPIC -pthread -fvisibility=hidden \
            -D_GNU_SOURCE -DHCCLD_VERSION='"$(VERSION)"' \
            -Ilibclient/include -Icommon $(LAYER_INC) -I$(BUILD)/gen
# What of daemon/ an object may include (docs/conventions.md, "Layers"): each layer
# (daemon/LAYER) sees only the folders it may use, through $(BUILD)/layers/LAYER, links that
# scripts/check-layers.py --views makes from its table, so an upward include does not build
# ("No such file"). Tests see all of daemon/; common, libclient and tools none.
LAYER_INC     = -Idaemon
DAEMON_LAYERS := $(notdir $(patsubst %/,%,$(wildcard daemon/*/)))
layer_dir     = $(BUILD)/layers/$(1)
LDFLAGS  ?=
ALLLDFLAGS = $(LDFLAGS) -pthread
ifneq ($(SANITIZE),)
ALLCFLAGS  += -fsanitize=$(SANITIZE) -fno-omit-frame-pointer
ALLLDFLAGS += -fsanitize=$(SANITIZE)
endif

GEN_C  := $(BUILD)/gen/hccld.pb-c.c
GEN_H  := $(BUILD)/gen/hccld.pb-c.h

COMMON_SRC := $(wildcard common/*.c)
CLIENT_SRC := $(wildcard libclient/*.c)
DAEMON_SRC := $(wildcard daemon/*.c daemon/*/*.c)
UNIT_SRC   := $(wildcard tests/unit/*.c)
# The conformance suite every transport passes (unit_tests: TCP; rdma_tests: RDMA).
TP_TEST_SRC := $(wildcard tests/transport/*.c)
ALGO_SRC   := $(wildcard daemon/algo/*.c)
# The engine core and the span layer for tests/unit/test_engine.c (l1 is linked on its own
# already).
ENGINE_SRC := $(wildcard daemon/sched/*.c daemon/span/*.c) daemon/exec/exec.c
# The formation layer over it, for tests/unit/test_form.c.
FORM_SRC   := $(wildcard daemon/form/*.c)
TP_SRC     := $(wildcard daemon/transport/*.c)
INTEG_SRC  := $(wildcard tests/integration/*.c)

obj = $(patsubst %.c,$(BUILD)/obj/%.o,$(1))
COMMON_OBJ := $(call obj,$(COMMON_SRC)) $(BUILD)/obj/gen/hccld.pb-c.o
CLIENT_OBJ := $(call obj,$(CLIENT_SRC))
DAEMON_OBJ := $(call obj,$(DAEMON_SRC))

BIN_HCCLD  := $(BUILD)/bin/hccld
BIN_TOOLS  := $(BUILD)/bin/hccld-ctl $(BUILD)/bin/hccl-run $(BUILD)/bin/hccl_perf_test \
              $(BUILD)/bin/hccl_latency_test
# Tools that are scripts: copied, so that build/bin holds every program.
BIN_SCRIPTS := $(BUILD)/bin/hccl-prof $(BUILD)/bin/hccl-topology
LIB_SO     := $(BUILD)/lib/libhccl.so
LIB_A      := $(BUILD)/lib/libhccl.a
LIB_PC     := $(BUILD)/lib/pkgconfig/hccl.pc
# pkg-config's convention for a package used from its build tree: with
# PKG_CONFIG_PATH=build/lib/pkgconfig, `pkg-config hccl` reads this one first.
LIB_PC_UN  := $(BUILD)/lib/pkgconfig/hccl-uninstalled.pc
EXAMPLES   := $(BUILD)/examples/allreduce
# Man pages, made by help2man from each program's --help and --version and man/NAME.h2m.
MAN8       := $(BUILD)/man/hccld.8 $(BUILD)/man/hccld-ctl.8
MAN1       := $(addprefix $(BUILD)/man/,hccl-run.1 hccl_perf_test.1 hccl_latency_test.1 \
              hccl-prof.1 hccl-topology.1)
UNIT_BIN   := $(BUILD)/tests/unit_tests
INTEG_BIN  := $(BUILD)/tests/integration_tests
SIM_BIN    := $(BUILD)/tests/sim_all
NETNS_SRC  := $(wildcard tests/netns/*.c)
NETNS_BIN  := $(BUILD)/tests/netns_tests

.PHONY: all test test-unit test-integration test-netns test-rdma test-tsan soak faultloop demo bench bench-retry bench-restart bench-multinode bench-qos bench-stripes bench-determinism bench-torch bench-stream \
	bench-latency bench-all bench-copy bench-zc-ceiling install clean \
	format-check layer-check
all: $(BIN_HCCLD) $(BIN_TOOLS) $(BIN_SCRIPTS) $(LIB_SO) $(LIB_A) $(LIB_PC) $(LIB_PC_UN) \
     $(EXAMPLES) $(MAN8) $(MAN1)

$(GEN_C) $(GEN_H): proto/hccld.proto | $(DEPS_STAMP)
	@mkdir -p $(BUILD)/gen
	protoc-c --proto_path=proto --c_out=$(BUILD)/gen proto/hccld.proto

$(BUILD)/obj/gen/hccld.pb-c.o: $(GEN_C)
	@mkdir -p $(@D)
	$(CC) $(ALLCFLAGS) $(call pc_cflags,libprotobuf-c) -c $< -o $@

# SIMD kernels are compiled for their ISA and chosen at run time (common/reduce.c).
$(BUILD)/obj/common/reduce_avx2.o:   ISAFLAGS := -mavx2 -mfma -mf16c
$(BUILD)/obj/common/reduce_avx512.o: ISAFLAGS := -mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma -mf16c

$(foreach l,$(DAEMON_LAYERS),$(eval \
  $(BUILD)/obj/daemon/$(l)/%.o: LAYER_INC = -I$(call layer_dir,$(l))))
$(BUILD)/obj/daemon/main.o: LAYER_INC = -I$(call layer_dir,server)
$(BUILD)/obj/common/%.o $(BUILD)/obj/libclient/%.o $(BUILD)/obj/tools/%.o: LAYER_INC =

LAYER_STAMP := $(BUILD)/layers/.made
$(LAYER_STAMP): scripts/check-layers.py | $(DEPS_STAMP)
	@rm -rf $(BUILD)/layers
	/usr/bin/python3 scripts/check-layers.py --views $(BUILD)/layers
	@touch $@

$(BUILD)/obj/%.o: %.c $(GEN_H) | $(DEPS_STAMP) $(LAYER_STAMP)
	@mkdir -p $(@D)
	$(CC) $(ALLCFLAGS) $(ISAFLAGS) $(call pc_cflags,$(PKGS_CORE) $(PKGS_TEST)) -MMD -MP -c $< -o $@

$(BUILD)/lib/libhcclcommon.a: $(COMMON_OBJ)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

$(LIB_SO): $(CLIENT_OBJ) $(COMMON_OBJ)
	@mkdir -p $(@D)
	$(CC) -shared -Wl,-soname,libhccl.so.0 -Wl,--no-undefined -o $@ $^ $(ALLLDFLAGS) \
	    $(call pc_libs,$(PKGS_CLIENT)) -lm
	ln -sf libhccl.so $(@D)/libhccl.so.0 # programs linked here run from the build tree

$(LIB_A): $(CLIENT_OBJ) $(COMMON_OBJ)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

$(LIB_PC): Makefile
	@mkdir -p $(@D)
	printf 'prefix=%s\nlibdir=$${prefix}/lib\nincludedir=$${prefix}/include\n\nName: hccl\nDescription: hcclD client library (HCCL API)\nVersion: %s\nRequires.private: libprotobuf-c jansson libsodium\nLibs: -L$${libdir} -lhccl\nLibs.private: -pthread -lm\nCflags: -I$${includedir}\n' \
	    '$(PREFIX)' '$(VERSION)' > $@

# The build tree's headers and library, and an rpath to it: a program built from the source
# tree runs without LD_LIBRARY_PATH.
$(LIB_PC_UN): Makefile
	@mkdir -p $(@D)
	printf 'Name: hccl\nDescription: hcclD client library (HCCL API), uninstalled\nVersion: %s\nRequires.private: libprotobuf-c jansson libsodium\nLibs: -L%s/lib -Wl,-rpath,%s/lib -lhccl\nLibs.private: -pthread -lm\nCflags: -I%s/libclient/include\n' \
	    '$(VERSION)' '$(abspath $(BUILD))' '$(abspath $(BUILD))' '$(CURDIR)' > $@

$(BUILD)/man/%.8: $(BUILD)/bin/% man/%.h2m
	@mkdir -p $(@D)
	help2man -N -s 8 -i man/$*.h2m -o $@ $<
$(BUILD)/man/%.1: $(BUILD)/bin/% man/%.h2m
	@mkdir -p $(@D)
	help2man -N -s 1 -i man/$*.h2m -o $@ $<

# The examples build as a user's program would: with pkg-config, against the shared library.
$(BUILD)/examples/%: examples/%.c $(LIB_SO) $(LIB_PC_UN)
	@mkdir -p $(@D)
	$(CC) -O2 -Wall -o $@ $< $$(PKG_CONFIG_PATH=$(BUILD)/lib/pkgconfig pkg-config --cflags --libs hccl)

$(BIN_HCCLD): $(DAEMON_OBJ) $(BUILD)/lib/libhcclcommon.a
	@mkdir -p $(@D)
	$(CC) -o $@ $^ $(ALLLDFLAGS) $(call pc_libs,$(PKGS_CORE)) -lm

# The scripts say the version they came with (--version).
$(BIN_SCRIPTS): $(BUILD)/bin/%: tools/% Makefile
	@mkdir -p $(@D)
	sed 's|@VERSION@|$(VERSION)|' $< > $@.tmp && chmod 0755 $@.tmp && mv $@.tmp $@

# Tools link the client library statically so that they run from the build tree.
$(BUILD)/bin/hccl_perf_test: $(addprefix $(BUILD)/obj/tools/,perf_colls.o perf_compare.o perf_procs.o)
$(BUILD)/bin/hccld-ctl: $(BUILD)/obj/tools/ctl_links.o $(BUILD)/obj/tools/ctl_watch.o
$(BUILD)/bin/hccl-run: $(BUILD)/obj/tools/run_watch.o
# hccl_perf_test run under this name prints latency percentiles (tools/hccl_perf_test.c).
$(BUILD)/bin/hccl_latency_test: $(BUILD)/bin/hccl_perf_test
	ln -f $< $@
$(BUILD)/bin/%: $(BUILD)/obj/tools/%.o $(LIB_A)
	@mkdir -p $(@D)
	$(CC) -o $@ $(filter %.o,$^) $(filter %.a,$^) $(ALLLDFLAGS) $(call pc_libs,$(PKGS_CLIENT)) -lm

$(UNIT_BIN): $(call obj,$(UNIT_SRC) $(TP_TEST_SRC) $(ALGO_SRC) $(TP_SRC) daemon/exec/l1.c daemon/server/daemon_conf.c tests/sim/sim.c $(ENGINE_SRC) $(FORM_SRC)) $(BUILD)/lib/libhcclcommon.a
	@mkdir -p $(@D)
	$(CC) -o $@ $^ $(ALLLDFLAGS) $(call pc_libs,$(PKGS_TEST) $(PKGS_CLIENT) libsodium inih libibverbs librdmacm) -lm

$(INTEG_BIN): $(call obj,$(INTEG_SRC)) $(LIB_A)
	@mkdir -p $(@D)
	$(CC) -o $@ $^ $(ALLLDFLAGS) $(call pc_libs,$(PKGS_TEST) $(PKGS_CLIENT)) -lm

# The level-1 simulator: every algorithm x collective for 1..64, 256, 1024, 4096 nodes.
$(SIM_BIN): $(call obj,tests/sim/main.c tests/sim/sim.c $(ALGO_SRC)) $(BUILD)/lib/libhcclcommon.a
	@mkdir -p $(@D)
	$(CC) -o $@ $^ $(ALLLDFLAGS) -lm

# Daemons in network namespaces; links the integration harness and references, not copies.
$(NETNS_BIN): $(call obj,$(NETNS_SRC) tests/integration/harness.c tests/integration/ref.c) $(LIB_A)
	@mkdir -p $(@D)
	$(CC) -o $@ $^ $(ALLLDFLAGS) $(call pc_libs,$(PKGS_TEST) $(PKGS_CLIENT)) -lm

# RoCE without RDMA hardware: a QEMU guest with two soft-RoCE devices (tests/rdma-vm/README.md):
# its selftest (rping, ib_write_bw across rxe1 -> rxe0), then the RDMA transport's suite and its
# throughput against ib_write_bw in one guest run (tests/rdma/run.sh; make test runs that part).
RDMA_TP_SRC    := $(wildcard daemon/transport/rdma*.c) daemon/transport/tp_kept.c
RDMA_TEST_BIN  := $(BUILD)/tests/rdma_tests
RDMA_BENCH_BIN := $(BUILD)/tests/bench_rdma
$(RDMA_TEST_BIN): $(call obj,tests/rdma/test_rdma.c tests/rdma/test_rdma_resume.c tests/rdma/main.c $(TP_TEST_SRC) $(RDMA_TP_SRC)) $(BUILD)/lib/libhcclcommon.a
	@mkdir -p $(@D)
	$(CC) -o $@ $^ $(ALLLDFLAGS) $(call pc_libs,$(PKGS_TEST) libsodium libibverbs librdmacm) -lm
$(RDMA_BENCH_BIN): $(call obj,tests/rdma/bench_rdma.c $(RDMA_TP_SRC)) $(BUILD)/lib/libhcclcommon.a
	@mkdir -p $(@D)
	$(CC) -o $@ $^ $(ALLLDFLAGS) $(call pc_libs,libsodium libibverbs librdmacm) -lm

# The fuzz targets carry ASan and UBSan in every build (tests/fuzz/fuzz.mk): an instrumented
# run would build and run the same smoke again, so only the plain one does.
test: all $(UNIT_BIN) $(INTEG_BIN) $(SIM_BIN) $(NETNS_BIN) $(RDMA_TEST_BIN) $(RDMA_BENCH_BIN) \
      format-check layer-check $(if $(SANITIZE),,fuzz-build)
	./tests/run.sh $(BUILD) $(SANITIZE)

test-unit: $(UNIT_BIN)
	$(UNIT_BIN)

test-integration: all $(INTEG_BIN)
	HCCLD_BIN=$(BIN_HCCLD) $(INTEG_BIN)

test-netns: all $(NETNS_BIN)
	HCCLD_BIN=$(BIN_HCCLD) $(NETNS_BIN)

test-rdma: all $(RDMA_TEST_BIN) $(RDMA_BENCH_BIN)
	./tests/rdma-vm/selftest.sh
	./tests/rdma/run.sh --bench $(RDMA_BENCH_BIN) --daemons $(BUILD) $(RDMA_TEST_BIN)

# ThreadSanitizer on the daemon's and the library's threads: its own build (the instrumented
# daemon, library and test runners), then tests/tsan.sh (unit and integration suites, the
# longest on a sample; any report from any process fails it).
TSAN_BUILD := build/sanitize-thread
test-tsan:
	$(MAKE) SANITIZE=thread all $(TSAN_BUILD)/tests/unit_tests $(TSAN_BUILD)/tests/integration_tests
	./tests/tsan.sh $(TSAN_BUILD)

# The load test at full length (make test runs it for 20 s): 32 clients in 8 jobs on 2 daemons,
# random checked collectives, daemon memory and descriptors watched. HCCLD_SOAK_SECS=600.
soak: all $(INTEG_BIN)
	HCCLD_SOAK_SECS=$${HCCLD_SOAK_SECS:-600} HCCLD_TEST_REPORT=1 HCCLD_BIN=$(BIN_HCCLD) \
	    $(INTEG_BIN) soak

# Issue 37's fault suite in full (make test runs a short form of it): every fault on 2 and 3
# daemons with 1 and 2 ranks each, longer baselines, each rank's figures printed.
faultloop: all $(INTEG_BIN)
	HCCLD_FAULTLOOP_LONG=1 HCCLD_TEST_REPORT=1 HCCLD_BIN=$(BIN_HCCLD) $(INTEG_BIN) faultloop

demo: all
	./scripts/demo.sh $(BUILD)

bench: all
	HCCLD_DEPS_BENCH=1 ./scripts/install-deps.sh
	./bench/run.sh $(BUILD)

bench-qos: all
	./bench/qos.sh $(BUILD)

bench-all: all
	HCCLD_DEPS_BENCH=1 ./scripts/install-deps.sh
	./bench/all.sh $(BUILD)

bench-latency: all
	HCCLD_DEPS_BENCH=1 ./scripts/install-deps.sh
	./bench/latency.sh $(BUILD)

bench-stripes: all
	./bench/stripes.sh $(BUILD)

bench-determinism: all
	./bench/determinism.sh $(BUILD)

bench-torch: all
	./bench/torch.sh $(BUILD)

bench-stream: all
	./bench/stream.sh $(BUILD)

bench-copy:
	./bench/copy_cost.sh $(BUILD)

bench-retry: all
	./bench/retry_cost.sh $(BUILD) 5 "2 4" $(RATE)

# BASE=DIR: the build directory of an older checkout to run beside this one.
bench-restart: all
	./bench/restart_cost.sh $(BUILD) 5 $(BASE)

bench-zc-ceiling: all
	./bench/zc_ceiling.sh $(BUILD)

bench-multinode: all
	HCCLD_DEPS_BENCH=1 ./scripts/install-deps.sh
	./bench/multinode.sh $(BUILD)

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/pkgconfig \
	    $(DESTDIR)$(PREFIX)/include/hccl
	install -m 0755 $(BIN_HCCLD) $(BIN_TOOLS) $(BIN_SCRIPTS) $(DESTDIR)$(PREFIX)/bin/
	install -m 0755 $(LIB_SO) $(DESTDIR)$(PREFIX)/lib/libhccl.so.0
	ln -sf libhccl.so.0 $(DESTDIR)$(PREFIX)/lib/libhccl.so
	install -m 0644 $(LIB_A) $(DESTDIR)$(PREFIX)/lib/
	install -m 0644 $(LIB_PC) $(DESTDIR)$(PREFIX)/lib/pkgconfig/
	install -m 0644 libclient/include/hccl/hccl.h $(DESTDIR)$(PREFIX)/include/hccl/
	install -d $(DESTDIR)$(PREFIX)/share/man/man1 $(DESTDIR)$(PREFIX)/share/man/man8 \
	    $(DESTDIR)$(PREFIX)/share/bash-completion/completions
	install -m 0644 $(MAN1) $(DESTDIR)$(PREFIX)/share/man/man1/
	install -m 0644 $(MAN8) $(DESTDIR)$(PREFIX)/share/man/man8/
	install -m 0644 tools/hccld-ctl.bash $(DESTDIR)$(PREFIX)/share/bash-completion/completions/hccld-ctl
	install -d $(DESTDIR)/lib/systemd/system $(DESTDIR)/etc/hccld
	sed 's|@BINDIR@|$(PREFIX)/bin|g' systemd/hccld.service > $(DESTDIR)/lib/systemd/system/hccld.service
	[ -e $(DESTDIR)/etc/hccld/hccld.conf ] || install -m 0644 systemd/hccld.conf $(DESTDIR)/etc/hccld/
	install -D -m 0644 systemd/hccld.sysusers $(DESTDIR)/usr/lib/sysusers.d/hccld.conf
	[ -n "$(DESTDIR)" ] || ! command -v systemd-sysusers >/dev/null || \
	    systemd-sysusers /usr/lib/sysusers.d/hccld.conf
	install -d $(DESTDIR)$(PYDIR)/hccl
	install -m 0644 python/hccl/*.py $(DESTDIR)$(PYDIR)/hccl/
	[ -n "$(DESTDIR)" ] || ldconfig

FORMAT_SRC = $(wildcard common/*.[ch] libclient/*.[ch] libclient/include/hccl/*.h daemon/*.c \
             daemon/*/*.[ch] tools/*.c tests/*/*.[ch] bench/*.c examples/*.c)
format-check:
	clang-format --dry-run --Werror $(FORMAT_SRC)

# The one-way layers of docs/conventions.md: an #include that follows no arrow fails, named.
layer-check:
	/usr/bin/python3 scripts/check-layers.py

clean:
	rm -rf $(BUILD)

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
.SECONDARY:

# libFuzzer targets: fuzz-build, fuzz-smoke (run by tests/run.sh), fuzz, fuzz-seeds.
include tests/fuzz/fuzz.mk
