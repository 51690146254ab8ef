# meshlm: one GNU Makefile. Sources by wildcard, objects in build/, -MMD -MP dependencies.
# Targets: all test asan fuzz bench format check-format check-layout clean.
# Options (opt-in): NATIVE=1 (-march=native), SAN=1 (ASan+UBSan build in build-asan/).

CC      ?= cc
# libpng and libjpeg (libjpeg-turbo): image decoding for the vision models (src/image/);
# utf8proc: Unicode normalization (NFC) for tokenizers that ask for it (Qwen's).
PKGS    := jansson libpcre2-8 libmicrohttpd libpng libjpeg libutf8proc
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null || echo -ljansson -lpcre2-8 -lmicrohttpd -lpng16 -ljpeg -lutf8proc)

BUILD   ?= build
WARN    := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wvla -Werror
# OPT and CFLAGS/LDFLAGS from the command line add to, never replace, the required flags.
OPT     ?= -O2 -g
ALL_CFLAGS := $(OPT) -std=c11 -D_GNU_SOURCE $(WARN) -pthread -Iinclude -Isrc -Itools -Itests $(PKG_CFLAGS) -MMD -MP
ALL_LDFLAGS := -pthread
LDLIBS  := $(PKG_LIBS) -lm -lpthread

# The mesh over MPI (src/dist/comm_mpi.c): built when mpicc is found (OpenMPI from Debian's
# libopenmpi-dev), MPI=0 to leave it out; without it only single-process runs work.
MPI ?= $(shell command -v mpicc >/dev/null 2>&1 && echo 1 || echo 0)
ifeq ($(MPI),1)
ALL_CFLAGS += -DMLM_HAVE_MPI $(shell mpicc --showme:compile)
LDLIBS     += $(shell mpicc --showme:link)
endif

ifeq ($(NATIVE),1)
ALL_CFLAGS += -march=native
endif
ifeq ($(SAN),1)
ALL_CFLAGS  += -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
ALL_LDFLAGS += -fsanitize=address,undefined
endif
ALL_CFLAGS  += $(CFLAGS)
ALL_LDFLAGS += $(LDFLAGS)

LIB_SRC   := $(wildcard src/*/*.c src/*/*/*.c)
LIB_OBJ   := $(LIB_SRC:%.c=$(BUILD)/%.o)
CLI_SRC   := $(wildcard tools/cli/*.c)
CLI_OBJ   := $(CLI_SRC:%.c=$(BUILD)/%.o)
# What the command and the server share (tools/common/: loading, mesh set-up, util).
COMMON_SRC := $(wildcard tools/common/*.c)
COMMON_OBJ := $(COMMON_SRC:%.c=$(BUILD)/%.o)
# The HTTP server (`meshlm serve`) is linked into the meshlm binary; its objects also form an
# archive (with tools/common/) so that tests of its parts (tests/unit/test_server_*.c) link only
# what they use.
SERVER_SRC := $(wildcard tools/server/*.c)
SERVER_OBJ := $(SERVER_SRC:%.c=$(BUILD)/%.o) $(COMMON_OBJ)
SERVER_LIB := $(BUILD)/libmeshlm-server.a
TEST_SRC  := $(wildcard tests/unit/*.c tests/kernels/*.c)
TEST_BIN  := $(addprefix $(BUILD)/tests/,$(basename $(notdir $(TEST_SRC))))
# Programs the mesh tests (tests/mesh/test_*.sh) start under mpirun.
MESH_SRC  := $(wildcard tests/mesh/*.c)
MESH_BIN  := $(MESH_SRC:tests/mesh/%.c=$(BUILD)/tests/mesh/%)
BENCH_SRC := $(wildcard bench/*.c)
BENCH_BIN := $(BENCH_SRC:bench/%.c=$(BUILD)/bench/%)
BENCH_COMMON := $(patsubst %.c,$(BUILD)/%.o,$(wildcard bench/common/*.c))

LIB := $(BUILD)/libmeshlm.a
CLI := $(BUILD)/meshlm

.PHONY: all test asan fuzz bench format check-format check-layout clean
all: $(LIB) $(CLI) $(TEST_BIN) $(MESH_BIN) $(BENCH_BIN)

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -c $< -o $@

# Each SIMD file is compiled with only its own ISA flags; dispatch happens at run time.
AVX2_FLAGS   := -mavx2 -mfma -mf16c
AVX512_FLAGS := -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx512bf16 -mfma
$(BUILD)/%_avx2.o: %_avx2.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(AVX2_FLAGS) -c $< -o $@
$(BUILD)/%_avx512.o: %_avx512.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(AVX512_FLAGS) -c $< -o $@
$(BUILD)/%_avxvnni.o: %_avxvnni.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(AVX2_FLAGS) -mavxvnni -c $< -o $@
$(BUILD)/%_amx.o: %_amx.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(AVX512_FLAGS) -mamx-tile -mamx-int8 -mamx-bf16 -c $< -o $@

# The chat page (GET /, tools/server/page.html) is compiled in: scripts/embed.sh (od and sed)
# turns it into $(BUILD)/gen/page_html.c (srv_page_html, srv_page_html_len), whose object
# joins the server's (the binary, the server archive, every BUILD).
PAGE_C   := $(BUILD)/gen/page_html.c
PAGE_OBJ := $(BUILD)/gen/page_html.o
SERVER_OBJ += $(PAGE_OBJ)
$(PAGE_C): tools/server/page.html scripts/embed.sh
	@mkdir -p $(dir $@)
	sh scripts/embed.sh srv_page_html $< $@
$(PAGE_OBJ): $(PAGE_C)
	$(CC) $(ALL_CFLAGS) -c $< -o $@

$(LIB): $(LIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@
	ar rcs $@ $^

$(SERVER_LIB): $(SERVER_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@
	ar rcs $@ $^

$(CLI): $(CLI_OBJ) $(SERVER_OBJ) $(LIB)
	$(CC) $(ALL_LDFLAGS) $(CLI_OBJ) $(SERVER_OBJ) $(LIB) $(LDLIBS) -o $@

# What the unit tests and the mesh programs share (tests/helpers.h) is linked into each.
TEST_HELPERS := $(BUILD)/tests/helpers.o
$(BUILD)/tests/%: $(BUILD)/tests/unit/%.o $(TEST_HELPERS) $(SERVER_LIB) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_LDFLAGS) $< $(TEST_HELPERS) $(SERVER_LIB) $(LIB) $(LDLIBS) -o $@
$(BUILD)/tests/mesh/%: $(BUILD)/tests/mesh/%.o $(TEST_HELPERS) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_LDFLAGS) $< $(TEST_HELPERS) $(LIB) $(LDLIBS) -o $@
$(BUILD)/tests/%: $(BUILD)/tests/kernels/%.o $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_LDFLAGS) $< $(LIB) $(LDLIBS) -o $@

$(BUILD)/bench/%: $(BUILD)/bench/%.o $(BENCH_COMMON) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_LDFLAGS) $< $(BENCH_COMMON) $(LIB) $(LDLIBS) -o $@

# Every test binary prints "N passed, N failed[, N skipped]" last; the runner sums them.
# The server tests (tests/server/*.sh) start a real `meshlm serve` and talk HTTP to it: with
# curl, and with the official openai Python client (SKIP when it is not installed).
# The mesh tests (tests/mesh/*.sh) run TP and DP under mpirun (SKIP without it).
KERNEL_TESTS := $(sort $(wildcard tests/kernels/test_*.sh))
SERVER_TESTS := $(sort $(wildcard tests/server/test_*.sh))
MESH_TESTS := $(sort $(wildcard tests/mesh/test_*.sh))
test: check-layout $(TEST_BIN) $(MESH_BIN) $(CLI)
	@MESHLM=$(CLI) MESH_BIN=$(BUILD)/tests/mesh sh tests/run.sh $(TEST_BIN) $(KERNEL_TESTS) $(SERVER_TESTS) $(MESH_TESTS)

# Arrows point down the stack: no folder of src/ includes one beside or above it, tools/ only
# the public header (scripts/check_layout.sh names the stack).
check-layout:
	@sh scripts/check_layout.sh

asan:
	$(MAKE) SAN=1 BUILD=build-asan OPT="-O1 -g" test

# libFuzzer targets (clang), each run for FUZZ_SECONDS from its committed seed corpus. The
# library is rebuilt with clang and the sanitizers in build-fuzz/lib by the same rules.
FUZZ_SECONDS ?= 20
FUZZ_SAN := -fsanitize=address,undefined -fno-sanitize-recover=undefined
FUZZ_SRC := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_BIN := $(FUZZ_SRC:tests/fuzz/%.c=build-fuzz/%)
FUZZ_LIB := build-fuzz/lib/libmeshlm.a
.PHONY: fuzz-lib lib
lib: $(LIB)
fuzz-lib:
	$(MAKE) CC=clang BUILD=build-fuzz/lib OPT="-O1 -g -fsanitize=fuzzer-no-link $(FUZZ_SAN)" lib
# fuzz_server_*: the server's request parser is built in with them.
FUZZ_SERVER := tools/server/request.c tools/server/request_tools.c tools/common/utf8.c
build-fuzz/fuzz_server_%: tests/fuzz/fuzz_server_%.c fuzz-lib $(FUZZ_SERVER) $(wildcard tests/fuzz/*.h)
	clang -std=c11 -D_GNU_SOURCE -g -O1 -Iinclude -Isrc -Itools -Itests -Itools/server $(PKG_CFLAGS) \
	  -fsanitize=fuzzer $(FUZZ_SAN) -pthread $< $(FUZZ_SERVER) $(FUZZ_LIB) $(LDLIBS) -o $@
build-fuzz/%: tests/fuzz/%.c fuzz-lib $(wildcard tests/fuzz/*.h)
	clang -std=c11 -D_GNU_SOURCE -g -O1 -Iinclude -Isrc -Itests $(PKG_CFLAGS) \
	  -fsanitize=fuzzer $(FUZZ_SAN) -pthread $< $(FUZZ_LIB) $(LDLIBS) -o $@
# Every target runs even when one finds a crash; the run fails at the end naming them.
fuzz: $(FUZZ_BIN)
	@failed=""; for f in $(FUZZ_BIN); do n=$${f#build-fuzz/fuzz_}; \
	  echo "fuzz: $$n ($(FUZZ_SECONDS)s)"; mkdir -p build-fuzz/corpus-$$n; \
	  if $$f -max_total_time=$(FUZZ_SECONDS) -max_len=65536 -rss_limit_mb=2048 \
	    build-fuzz/corpus-$$n tests/fuzz/corpus/$$n 2>build-fuzz/$$n.log; then \
	    grep -E 'Done [0-9]+ runs' build-fuzz/$$n.log || true; \
	  else tail -40 build-fuzz/$$n.log; failed="$$failed $$n"; fi; done; \
	  if [ -n "$$failed" ]; then echo "fuzz: crashes in:$$failed (logs in build-fuzz/NAME.log)"; exit 1; fi

bench: $(BENCH_BIN) $(CLI)
	@for b in $(BENCH_BIN); do echo "== $$b"; $$b || exit 1; done

FORMAT_SRC := $(shell find include src tools tests bench -name '*.[ch]' 2>/dev/null)
format:
	clang-format -i $(FORMAT_SRC)
check-format:
	clang-format --dry-run --Werror $(FORMAT_SRC)

clean:
	rm -rf build build-asan build-fuzz

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
