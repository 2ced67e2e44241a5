set -u
export PATH=/opt/torch/.venv/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $OUT/gpu.txt 2>&1
cmake -S . -B build-gpu -G Ninja -DGPUMEM_CUDA=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGPUMEM_BUILD_BENCH=OFF > $OUT/configure.log 2>&1 || { tail -50 $OUT/configure.log; exit 1; }
cmake --build build-gpu -j 16 > $OUT/build.log 2>&1 || { grep -E "error|FAILED" $OUT/build.log | head -40; exit 1; }
export GPUMEM_REQUIRE_GPU=1
ctest --test-dir build-gpu -L gpu -j 1 --output-on-failure --timeout 300 > $OUT/gpu-mps-off.log 2>&1; echo "mps-off rc=$?"
tail -25 $OUT/gpu-mps-off.log
ctest --test-dir build-gpu -L host -R "Restart|Reservation|Books|Unconfigured|Config|Reload|Tenants|StateStore" -E "^Gpu" -j 8 --timeout 300 > $OUT/host.log 2>&1; echo "host rc=$?"
tail -6 $OUT/host.log
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mpsp CUDA_MPS_LOG_DIRECTORY=/tmp/mpsl
mkdir -p /tmp/mpsp /tmp/mpsl
nvidia-cuda-mps-control -d
ctest --test-dir build-gpu -L gpu -j 1 --output-on-failure --timeout 300 > $OUT/gpu-mps-on.log 2>&1; echo "mps-on rc=$?"
tail -25 $OUT/gpu-mps-on.log
echo quit | nvidia-cuda-mps-control
