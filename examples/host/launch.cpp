// Launch fusecc's kernels on a GPU from C++: the driver API and NVRTC, no fusecc.
//
//   fusecc model.ir -o kernels.cu                 # kernels.cu + kernels.json (+ kernels.safetensors: weights)
//   nvcc -std=c++17 -o launch launch.cpp -lcuda -lnvrtc
//   ./launch kernels.json                          # reads NAME.bin per input, writes NAME.bin per output
//
// The .bin files hold each tensor's bytes as the device stores them (row-major;
// f16 as IEEE half, bf16 as its 16-bit pattern, i1 one byte per element).
// Steps, as docs/cuda-manifest.md describes: compile the source with NVRTC and
// the manifest's compile_options, make one allocation (the arena, then each
// input, then each output, then each constant, each 256-byte aligned), upload
// the constants from the safetensors file the manifest names (its bytes are the
// device layout already), copy inputs in, opt kernels
// in to the dynamic shared memory their launches need (shared_opt_in), launch
// in order on one stream, copy outputs out. The JSON reader below reads the
// manifest and safetensors headers, nothing else (no escapes beyond \" and \\).
#include <cuda.h>
#include <nvrtc.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace {

// ---------------------------------------------------------------- a small JSON value
struct Json {
  enum Kind { Null, Bool, Number, String, Array, Object } kind = Null;
  bool boolean = false;
  double number = 0;
  std::string text;
  std::vector<Json> items;
  std::map<std::string, Json> fields;

  const Json& operator[](const std::string& key) const {
    static const Json missing;
    auto it = fields.find(key);
    return it == fields.end() ? missing : it->second;
  }
  bool has(const std::string& key) const { return fields.count(key) != 0; }
  long long integer() const { return static_cast<long long>(number); }
};

class JsonReader {
 public:
  explicit JsonReader(const std::string& text) : s_(text) {}
  Json read() {
    Json value = value_();
    skip_();
    if (i_ != s_.size()) fail_("trailing text");
    return value;
  }

 private:
  const std::string& s_;
  size_t i_ = 0;

  [[noreturn]] void fail_(const char* what) {
    std::fprintf(stderr, "kernels.json: %s at byte %zu\n", what, i_);
    std::exit(1);
  }
  void skip_() { while (i_ < s_.size() && std::strchr(" \t\r\n", s_[i_])) ++i_; }
  bool eat_(char c) { skip_(); if (i_ < s_.size() && s_[i_] == c) { ++i_; return true; } return false; }
  std::string string_() {
    if (!eat_('"')) fail_("expected a string");
    std::string out;
    while (i_ < s_.size() && s_[i_] != '"') {
      if (s_[i_] == '\\') ++i_;
      out += s_[i_++];
    }
    if (!eat_('"')) fail_("unterminated string");
    return out;
  }
  Json value_() {
    skip_();
    Json v;
    if (i_ >= s_.size()) fail_("unexpected end");
    char c = s_[i_];
    if (c == '{') {
      ++i_; v.kind = Json::Object;
      if (eat_('}')) return v;
      do { std::string key = string_(); if (!eat_(':')) fail_("expected ':'"); v.fields[key] = value_(); } while (eat_(','));
      if (!eat_('}')) fail_("expected '}'");
    } else if (c == '[') {
      ++i_; v.kind = Json::Array;
      if (eat_(']')) return v;
      do v.items.push_back(value_()); while (eat_(','));
      if (!eat_(']')) fail_("expected ']'");
    } else if (c == '"') {
      v.kind = Json::String; v.text = string_();
    } else if (s_.compare(i_, 4, "true") == 0 || s_.compare(i_, 5, "false") == 0) {
      v.kind = Json::Bool; v.boolean = s_[i_] == 't'; i_ += v.boolean ? 4 : 5;
    } else if (s_.compare(i_, 4, "null") == 0) {
      i_ += 4;
    } else {
      char* end = nullptr;
      v.kind = Json::Number; v.number = std::strtod(s_.c_str() + i_, &end);
      if (end == s_.c_str() + i_) fail_("expected a value");
      i_ = end - s_.c_str();
    }
    return v;
  }
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) { std::fprintf(stderr, "cannot read %s\n", path.c_str()); std::exit(1); }
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// ---------------------------------------------------------------- the manifest's memory plan
constexpr size_t kAlignment = 256;
size_t aligned(size_t n) { return (n + kAlignment - 1) / kAlignment * kAlignment; }

size_t element_bytes(const std::string& dtype) {
  if (dtype == "f64" || dtype == "i64") return 8;
  if (dtype == "f32" || dtype == "i32") return 4;
  if (dtype == "f16" || dtype == "bf16") return 2;
  if (dtype == "i8" || dtype == "i1") return 1;
  std::fprintf(stderr, "unknown dtype %s\n", dtype.c_str());
  std::exit(1);
}

size_t tensor_bytes(const Json& tensor) {
  size_t n = element_bytes(tensor["dtype"].text);
  for (const Json& d : tensor["shape"].items) n *= static_cast<size_t>(d.integer());
  return n;
}

// A scalar argument's bytes, as the kernel's parameter of that dtype holds them.
struct Scalar { alignas(8) unsigned char bytes[8] = {}; };

uint16_t bf16_bits(float f) {
  uint32_t bits; std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;  // NaN
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

Scalar scalar(const Json& arg) {
  Scalar out;
  const std::string& dtype = arg["dtype"].text;
  double v = arg["scalar"].number;
  auto put = [&](auto value) { std::memcpy(out.bytes, &value, sizeof value); };
  if (dtype == "f64") put(v);
  else if (dtype == "f32") put(static_cast<float>(v));
  else if (dtype == "bf16") put(bf16_bits(static_cast<float>(v)));
  else if (dtype == "f16") { std::fprintf(stderr, "f16 scalar arguments: convert with __float2half on the host\n"); std::exit(1); }
  else if (dtype == "i64") put(static_cast<int64_t>(v));
  else if (dtype == "i32") put(static_cast<int32_t>(v));
  else if (dtype == "i8") put(static_cast<int8_t>(v));
  else put(static_cast<uint8_t>(v != 0));
  return out;
}

#define CHECK_CU(call) do { CUresult r_ = (call); if (r_ != CUDA_SUCCESS) { const char* m_ = nullptr; cuGetErrorString(r_, &m_); \
  std::fprintf(stderr, "%s: %s\n", #call, m_ ? m_ : "CUDA error"); std::exit(1); } } while (0)
#define CHECK_NVRTC(call) do { nvrtcResult r_ = (call); if (r_ != NVRTC_SUCCESS) { \
  std::fprintf(stderr, "%s: %s\n", #call, nvrtcGetErrorString(r_)); std::exit(1); } } while (0)

std::string compile(const std::string& source, const Json& manifest, CUdevice device) {
  int major = 0, minor = 0;
  CHECK_CU(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device));
  CHECK_CU(cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device));
  std::vector<std::string> options = {"-arch=compute_" + std::to_string(major * 10 + minor)};
  if (manifest.has("compile_options")) for (const Json& o : manifest["compile_options"].items) options.push_back(o.text);
  else options.push_back("-std=c++17");
  std::vector<const char*> flags;
  for (const std::string& o : options) flags.push_back(o.c_str());
  nvrtcProgram program;
  CHECK_NVRTC(nvrtcCreateProgram(&program, source.c_str(), manifest["source"].text.c_str(), 0, nullptr, nullptr));
  if (nvrtcCompileProgram(program, static_cast<int>(flags.size()), flags.data()) != NVRTC_SUCCESS) {
    size_t size = 0;
    nvrtcGetProgramLogSize(program, &size);
    std::string log(size, '\0');
    nvrtcGetProgramLog(program, &log[0]);
    std::fprintf(stderr, "NVRTC rejected %s:\n%s\n", manifest["source"].text.c_str(), log.c_str());
    std::exit(1);
  }
  size_t size = 0;
  CHECK_NVRTC(nvrtcGetPTXSize(program, &size));
  std::string ptx(size, '\0');
  CHECK_NVRTC(nvrtcGetPTX(program, &ptx[0]));
  nvrtcDestroyProgram(&program);
  return ptx;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) { std::fprintf(stderr, "usage: %s kernels.json\n", argv[0]); return 1; }
  const std::string manifest_path = argv[1];
  const std::string folder = manifest_path.find('/') == std::string::npos ? "" : manifest_path.substr(0, manifest_path.rfind('/') + 1);
  const Json manifest = JsonReader(read_file(manifest_path)).read();
  const long long version = manifest["version"].integer();
  if (version != 1 && version != 2) { std::fprintf(stderr, "this host reads manifest versions 1 and 2\n"); return 1; }

  // The memory plan: arena at 0, then inputs, then outputs, then constants, each aligned.
  std::map<std::string, size_t> offsets, constant_offsets;
  size_t end = static_cast<size_t>(manifest["arena_bytes"].integer());
  for (const char* role : {"inputs", "outputs"})
    for (const Json& t : manifest[role].items) { offsets[t["name"].text] = aligned(end); end = offsets[t["name"].text] + tensor_bytes(t); }
  for (const Json& c : manifest["constants"].items) { constant_offsets[c["name"].text] = aligned(end); end = constant_offsets[c["name"].text] + tensor_bytes(c); }
  const size_t total = aligned(end > 0 ? end : 1);

  CHECK_CU(cuInit(0));
  CUdevice device;
  CHECK_CU(cuDeviceGet(&device, 0));
  CUcontext context;
  CHECK_CU(cuDevicePrimaryCtxRetain(&context, device));
  CHECK_CU(cuCtxSetCurrent(context));
  const std::string ptx = compile(read_file(folder + manifest["source"].text), manifest, device);
  CUmodule module;
  CHECK_CU(cuModuleLoadData(&module, ptx.c_str()));

  std::map<std::string, CUfunction> kernels;
  for (const Json& launch : manifest["launches"].items) {
    const std::string& name = launch["kernel"].text;
    if (!kernels.count(name)) CHECK_CU(cuModuleGetFunction(&kernels[name], module, name.c_str()));
    // Above 48 KiB of dynamic shared memory a kernel must opt in before it is launched.
    if (launch["shared_opt_in"].boolean)
      CHECK_CU(cuFuncSetAttribute(kernels[name], CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, static_cast<int>(launch["shared_bytes"].integer())));
  }

  CUdeviceptr base;
  CHECK_CU(cuMemAlloc(&base, total));
  CHECK_CU(cuMemsetD8(base, 0, total));
  for (const Json& t : manifest["inputs"].items) {
    const std::string bytes = read_file(folder + t["name"].text + ".bin");
    if (bytes.size() != tensor_bytes(t)) { std::fprintf(stderr, "%s.bin: %zu bytes, expected %zu\n", t["name"].text.c_str(), bytes.size(), tensor_bytes(t)); return 1; }
    CHECK_CU(cuMemcpyHtoD(base + offsets[t["name"].text], bytes.data(), bytes.size()));
  }
  // Constants (weights), once: tensor `tensor` of the safetensors file `file` beside the manifest.
  std::map<std::string, std::string> files;
  for (const Json& c : manifest["constants"].items) {
    const std::string& file = c["file"].text;
    if (file.empty() || file[0] == '/' || file.find("..") != std::string::npos) { std::fprintf(stderr, "constant file '%s' is not inside the manifest's folder\n", file.c_str()); return 1; }
    if (!files.count(file)) files[file] = read_file(folder + file);
    const std::string& data = files[file];
    uint64_t header_size = 0;
    for (int b = 7; b >= 0 && data.size() >= 8; --b) header_size = header_size << 8 | static_cast<unsigned char>(data[b]);
    if (data.size() < 8 || header_size > data.size() - 8) { std::fprintf(stderr, "%s: not a safetensors file\n", file.c_str()); return 1; }
    const Json header = JsonReader(data.substr(8, header_size)).read();
    const Json& entry = header[c["tensor"].text];
    const size_t first = static_cast<size_t>(entry["data_offsets"].items.size() == 2 ? entry["data_offsets"].items[0].integer() : 0);
    const size_t last = static_cast<size_t>(entry["data_offsets"].items.size() == 2 ? entry["data_offsets"].items[1].integer() : 0);
    if (last - first != tensor_bytes(c) || last < first || 8 + header_size + last > data.size()) {
      std::fprintf(stderr, "%s: no tensor '%s' of %zu bytes\n", file.c_str(), c["tensor"].text.c_str(), tensor_bytes(c));
      return 1;
    }
    CHECK_CU(cuMemcpyHtoD(base + constant_offsets[c["name"].text], data.data() + 8 + header_size + first, last - first));
  }

  for (const Json& launch : manifest["launches"].items) {
    std::vector<CUdeviceptr> pointers;
    std::vector<Scalar> scalars;
    pointers.reserve(launch["args"].items.size());  // no reallocation: params point into these
    scalars.reserve(launch["args"].items.size());
    std::vector<void*> params;
    for (const Json& arg : launch["args"].items) {
      if (arg.has("input") || arg.has("output")) {
        pointers.push_back(base + offsets[arg.has("input") ? arg["input"].text : arg["output"].text]);
        params.push_back(&pointers.back());
      } else if (arg.has("arena")) {
        pointers.push_back(base + static_cast<size_t>(arg["arena"].integer()));
        params.push_back(&pointers.back());
      } else if (arg.has("constant")) {
        pointers.push_back(base + constant_offsets[arg["constant"].text]);
        params.push_back(&pointers.back());
      } else {
        scalars.push_back(scalar(arg));
        params.push_back(scalars.back().bytes);
      }
    }
    unsigned dims[6] = {1, 1, 1, 1, 1, 1};
    for (size_t d = 0; d < launch["grid"].items.size(); ++d) dims[d] = static_cast<unsigned>(launch["grid"].items[d].integer());
    for (size_t d = 0; d < launch["block"].items.size(); ++d) dims[3 + d] = static_cast<unsigned>(launch["block"].items[d].integer());
    CHECK_CU(cuLaunchKernel(kernels[launch["kernel"].text], dims[0], dims[1], dims[2], dims[3], dims[4], dims[5],
                            static_cast<unsigned>(launch["shared_bytes"].integer()), nullptr, params.data(), nullptr));
  }
  CHECK_CU(cuCtxSynchronize());

  for (const Json& t : manifest["outputs"].items) {
    std::vector<char> host(tensor_bytes(t));
    CHECK_CU(cuMemcpyDtoH(host.data(), base + offsets[t["name"].text], host.size()));
    std::ofstream(folder + t["name"].text + ".bin", std::ios::binary).write(host.data(), static_cast<std::streamsize>(host.size()));
    std::printf("%s: %zu bytes -> %s.bin\n", t["name"].text.c_str(), host.size(), t["name"].text.c_str());
  }
  CHECK_CU(cuMemFree(base));
  CHECK_CU(cuDevicePrimaryCtxRelease(device));
  return 0;
}
