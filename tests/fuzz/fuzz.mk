# libFuzzer targets (issue 5, tests/fuzz/README.md), included by the top Makefile; uses its
# BUILD, COMMON_SRC, ALGO_SRC, GEN_C/GEN_H, WARN, VERSION, DEPS_STAMP and pc_cflags/pc_libs.
#   make fuzz-build                          every target, into $(BUILD)/fuzz/
#   make fuzz-smoke [FUZZ_SMOKE_SECS=15]     each target that long on a copy of its seeds
#   make fuzz [FUZZ_SECS=600]                each target that long; keeps $(BUILD)/fuzz/corpus/
#   make fuzz-seeds                          regenerates the binary seeds in tests/fuzz/corpus/
# Everything is built with clang (Debian's clang package carries libFuzzer), separately from
# the gcc objects, so that instrumented and plain builds never mix.

FUZZ_CC         ?= clang
FUZZ_SMOKE_SECS ?= 15
FUZZ_SECS       ?= 600
FUZZ_TARGETS    := frame desc ranktable conf algo tcp_hs peer rdma_wire
FUZZ_DIR        := $(BUILD)/fuzz
FUZZ_PKGS       := libprotobuf-c libsodium jansson inih libuv
# UB aborts instead of printing and going on, so that libFuzzer counts it as a crash.
FUZZ_SAN        := -fsanitize=address,undefined -fno-sanitize-recover=all
FUZZ_CFLAGS      = -g -O1 -fno-omit-frame-pointer $(FUZZ_SAN) -fsanitize=fuzzer-no-link $(WARN) \
                   -std=gnu11 -pthread -D_GNU_SOURCE -DHCCLD_VERSION='"$(VERSION)"' \
                   -Ilibclient/include -Icommon -Idaemon -I$(BUILD)/gen -Itests/fuzz \
                   $(call pc_cflags,$(FUZZ_PKGS))
FUZZ_LIBS        = $(call pc_libs,$(FUZZ_PKGS)) -lm

# The code under test; the SIMD reduction kernels are left out (no target reaches them).
FUZZ_LIB_SRC := $(filter-out common/reduce%.c common/l0.c,$(COMMON_SRC)) $(ALGO_SRC) \
                daemon/transport/tcp_hs.c daemon/transport/tcp_wire.c \
                daemon/transport/tcp_sock.c daemon/transport/rdma_wire.c daemon/sched/qos_conf.c daemon/server/daemon_conf.c \
                daemon/server/peer.c
fuzz_obj      = $(patsubst %.c,$(FUZZ_DIR)/obj/%.o,$(1))
FUZZ_LIB      := $(FUZZ_DIR)/libhccld-fuzz.a
FUZZ_BINS     := $(addprefix $(FUZZ_DIR)/fuzz_,$(FUZZ_TARGETS))

.PHONY: fuzz-build fuzz-smoke fuzz fuzz-seeds

fuzz-build: $(FUZZ_BINS)

$(FUZZ_DIR)/obj/%.o: %.c $(GEN_H) | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -MMD -MP -c $< -o $@

$(FUZZ_DIR)/obj/gen/hccld.pb-c.o: $(GEN_C)
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -c $< -o $@

$(FUZZ_LIB): $(call fuzz_obj,$(FUZZ_LIB_SRC)) $(FUZZ_DIR)/obj/gen/hccld.pb-c.o \
	     $(FUZZ_DIR)/obj/tests/fuzz/fuzz_common.o
	rm -f $@ && ar rcs $@ $^

$(FUZZ_DIR)/fuzz_%: $(FUZZ_DIR)/obj/tests/fuzz/fuzz_%.o $(FUZZ_LIB)
	$(FUZZ_CC) -fsanitize=fuzzer $(FUZZ_SAN) -o $@ $^ $(FUZZ_LIBS)

# The generator is an ordinary program: the same objects, without libFuzzer's main.
$(FUZZ_DIR)/gen_seeds: $(FUZZ_DIR)/obj/tests/fuzz/gen_seeds.o $(FUZZ_LIB)
	$(FUZZ_CC) -fsanitize=fuzzer-no-link $(FUZZ_SAN) -o $@ $^ $(FUZZ_LIBS)

fuzz-seeds: $(FUZZ_DIR)/gen_seeds
	$(FUZZ_DIR)/gen_seeds tests/fuzz/corpus

fuzz-smoke: $(FUZZ_BINS)
	./tests/fuzz/run.sh $(BUILD) $(FUZZ_SMOKE_SECS) smoke $(FUZZ_TARGETS)

fuzz: $(FUZZ_BINS)
	./tests/fuzz/run.sh $(BUILD) $(FUZZ_SECS) keep $(FUZZ_TARGETS)

-include $(shell find $(FUZZ_DIR)/obj -name '*.d' 2>/dev/null)
