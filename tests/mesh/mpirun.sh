# tests/mesh/mpirun.sh: sourced by the mesh tests. MPIRUN is the mpirun command they start
# ranks with, and the environment the ranks share:
#   - more ranks than cores (2 cores, up to 8 ranks), no binding, and no single-copy shared
#     memory (CMA needs ptrace rights that containers often withhold); as root, its flag;
#   - shared-memory segments in the temp folder: a container's /dev/shm may be too small;
#   - under `make asan`: OpenMPI keeps allocations until exit in components it has unloaded
#     by then, which LeakSanitizer reports without a stack to suppress; leak checks stay on for
#     every single-process test, the ranks check memory errors only;
#   - no mesh notice on stderr, every MPI help message in full.
MPIRUN="mpirun --oversubscribe --bind-to none --mca btl_vader_single_copy_mechanism none"
[ "$(id -u)" = 0 ] && MPIRUN="$MPIRUN --allow-run-as-root"
export OMPI_MCA_btl_vader_backing_directory="${TMPDIR:-/tmp}"
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
export MESHLM_QUIET_MESH=1 OMPI_MCA_orte_base_help_aggregate=0
