// The CUDA backend's entry points in a build without nvcc: every one reports that this build has none.
#include "megakernel/cuda/cuda_executor.h"
#include "tilefire/errors.h"

namespace tilefire {

namespace {
[[noreturn]] void no_cuda() {
  throw InputError("--backend cuda: this build of tilefire has no CUDA backend (nvcc was not found when it was "
                   "configured; install the CUDA toolkit and rebuild)");
}
}  // namespace

class CudaProgram {};
void CudaProgramDeleter::operator()(CudaProgram* program) const { delete program; }
struct CudaExecutor::State {};

DeviceBuffer::DeviceBuffer(uint64_t) { no_cuda(); }
DeviceBuffer::~DeviceBuffer() = default;
DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept : data_(other.data_), bytes_(other.bytes_) {}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&&) noexcept { return *this; }

std::string CudaExecutor::unavailable_reason(int) { return "this build of tilefire has no CUDA backend"; }
int CudaExecutor::device_count() { return 0; }
uint32_t CudaExecutor::hung_kernels_running() { return 0; }
bool CudaExecutor::keep_if_group_held(const std::vector<int>&, int, void*) { return false; }
void CudaExecutor::prepare_for_allocation(int) {}
double CudaExecutor::measure_copy_bandwidth_gbs(int, uint64_t) { no_cuda(); }
CudaExecutor::CudaExecutor(const CudaOptions&) { no_cuda(); }
CudaExecutor::~CudaExecutor() = default;
uint32_t CudaExecutor::workers() const { no_cuda(); }
std::string CudaExecutor::device_name() const { no_cuda(); }
uint64_t CudaExecutor::free_memory_bytes() const { no_cuda(); }
const CudaOptions& CudaExecutor::options() const { no_cuda(); }
uint64_t CudaExecutor::launches() const { return 0; }
void CudaExecutor::make_current() const { no_cuda(); }
void CudaExecutor::set_rank_view(const RankView&) { no_cuda(); }
DeviceBuffer CudaExecutor::upload(const void*, uint64_t) { no_cuda(); }
void CudaExecutor::upload_to(void*, const void*, uint64_t) { no_cuda(); }
void CudaExecutor::download(void*, const void*, uint64_t) { no_cuda(); }
void CudaExecutor::copy_within(const std::vector<DeviceCopy>&) { no_cuda(); }
CudaProgramPtr CudaExecutor::load(const Program&, std::vector<void*>) { no_cuda(); }
void CudaExecutor::set_slot(CudaProgram&, uint32_t, void*) { no_cuda(); }
CudaStepResult CudaExecutor::run_step(CudaProgram&, const StepInputs&, ScheduleMode, std::vector<TaskTiming>*) { no_cuda(); }
void CudaExecutor::set_resident(bool) { no_cuda(); }
void CudaExecutor::stop_resident_kernel() {}

}  // namespace tilefire
