// Loads a real `rlparity report` page in Debian's headless chromium (label: browser): no console
// errors, the script ran, every plot is in the DOM with drawn data, and the screenshot shows the
// recipes' plot colours (not an empty plot area). The screenshot is kept at
// reports/report-screenshot.png (the CI artifact). Skips when /usr/bin/chromium is absent
// (tools/setup.sh installs it).
#include <gtest/gtest.h>
#include <zlib.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "unit/gate_test_util.hpp"

namespace {

namespace fs = std::filesystem;
constexpr const char* kChromium = "/usr/bin/chromium";

struct Shell {
  int code = -1;
  std::string out, err;
};

// Runs a shell command with stdout and stderr captured into files in `dir`.
Shell sh(const std::string& cmd, const rlp_test::TempDir& dir, const std::string& tag) {
  const std::string out = dir / (tag + ".stdout"), err = dir / (tag + ".stderr");
  const std::string full =
      "timeout 120 " + cmd + " >" + rlp_test::shell_quote(out) + " 2>" + rlp_test::shell_quote(err);
  Shell r;
  const int st = std::system(full.c_str());
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  r.out = rlp_test::read_text(out);
  r.err = rlp_test::read_text(err);
  return r;
}

// Headless chromium with a fresh profile; `mode`: "--dump-dom" and/or "--screenshot=PATH".
Shell chromium(const std::string& mode, const std::string& url, const rlp_test::TempDir& dir,
               const std::string& tag) {
  const std::string profile = dir / (tag + "-profile");
  fs::create_directories(profile);
  std::string cmd =
      std::string(kChromium) +
      " --headless --no-sandbox --disable-gpu --disable-background-networking --disable-component-update"
      " --disable-sync --no-first-run --disable-default-apps --mute-audio --hide-scrollbars"
      " --user-data-dir=" +
      rlp_test::shell_quote(profile) + " --enable-logging=stderr --v=0 --window-size=1400,3000 " + mode +
      " " + rlp_test::shell_quote(url);
  return sh(cmd, dir, tag);
}

// Console messages in chromium's stderr log. Chromium logs every console message as
// "[...:INFO:CONSOLE:<line>] "<text>", source: <url> (<line>)" whatever its level (uncaught
// exceptions read "Uncaught ..."), and older versions as ":ERROR:CONSOLE(...)". The report never
// writes to the console, so every console line counts as an error.
std::vector<std::string> console_errors(const std::string& log) {
  std::vector<std::string> out;
  std::stringstream ss(log);
  std::string line;
  while (std::getline(ss, line))
    if (line.find(":CONSOLE") != std::string::npos) out.push_back(line);
  return out;
}

// ---- minimal PNG decoder (8-bit RGB/RGBA, non-interlaced: what chromium writes) ----
struct Image {
  uint32_t width = 0, height = 0;
  std::vector<std::array<uint8_t, 3>> px;
};

uint32_t be32(const std::string& s, std::size_t i) {
  return (uint32_t(uint8_t(s[i])) << 24) | (uint32_t(uint8_t(s[i + 1])) << 16) |
         (uint32_t(uint8_t(s[i + 2])) << 8) | uint8_t(s[i + 3]);
}

bool decode_png(const std::string& data, Image& img, std::string& why) {
  if (data.size() < 8 || data.compare(0, 8, "\x89PNG\r\n\x1a\n") != 0) return why = "not a PNG", false;
  std::string idat;
  int depth = 0, ctype = 0, interlace = 0;
  for (std::size_t i = 8; i + 8 <= data.size();) {
    const uint32_t len = be32(data, i);
    const std::string type = data.substr(i + 4, 4);
    if (i + 12 + len > data.size()) return why = "truncated chunk", false;
    if (type == "IHDR") {
      img.width = be32(data, i + 8);
      img.height = be32(data, i + 12);
      depth = uint8_t(data[i + 16]);
      ctype = uint8_t(data[i + 17]);
      interlace = uint8_t(data[i + 20]);
    } else if (type == "IDAT") {
      idat.append(data, i + 8, len);
    }
    i += 12 + len;
  }
  if (depth != 8 || (ctype != 2 && ctype != 6) || interlace != 0)
    return why = "unsupported PNG format", false;
  const std::size_t bpp = ctype == 6 ? 4 : 3, stride = img.width * bpp;
  std::vector<uint8_t> raw((stride + 1) * img.height);
  uLongf n = static_cast<uLongf>(raw.size());
  if (uncompress(raw.data(), &n, reinterpret_cast<const Bytef*>(idat.data()),
                 static_cast<uLong>(idat.size())) != Z_OK ||
      n != raw.size())
    return why = "inflate failed", false;
  std::vector<uint8_t> prev(stride, 0), cur(stride);
  img.px.resize(std::size_t(img.width) * img.height);
  for (std::size_t y = 0; y < img.height; ++y) {
    const uint8_t f = raw[y * (stride + 1)];
    const uint8_t* line = &raw[y * (stride + 1) + 1];
    for (std::size_t x = 0; x < stride; ++x) {
      const int a = x >= bpp ? cur[x - bpp] : 0, b = prev[x], c = x >= bpp ? prev[x - bpp] : 0;
      int p = 0;
      switch (f) {
        case 0: p = 0; break;
        case 1: p = a; break;
        case 2: p = b; break;
        case 3: p = (a + b) / 2; break;
        case 4: {
          const int q = a + b - c, pa = std::abs(q - a), pb = std::abs(q - b), pc = std::abs(q - c);
          p = (pa <= pb && pa <= pc) ? a : (pb <= pc ? b : c);
          break;
        }
        default: return why = "bad filter", false;
      }
      cur[x] = static_cast<uint8_t>(line[x] + p);
    }
    for (std::size_t x = 0; x < img.width; ++x)
      img.px[y * img.width + x] = {cur[x * bpp], cur[x * bpp + 1], cur[x * bpp + 2]};
    std::swap(prev, cur);
  }
  return true;
}

std::size_t count_color(const Image& img, const std::string& hex, int tol = 24) {
  const auto v = std::stoul(hex.substr(1), nullptr, 16);
  const int r = int((v >> 16) & 255), g = int((v >> 8) & 255), b = int(v & 255);
  std::size_t n = 0;
  for (const auto& p : img.px)
    if (std::abs(p[0] - r) <= tol && std::abs(p[1] - g) <= tol && std::abs(p[2] - b) <= tol) ++n;
  return n;
}

std::size_t count(const std::string& s, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

TEST(ReportBrowser, ChromiumCanaryDetectsConsoleErrors) {
  if (!fs::exists(kChromium))
    GTEST_SKIP() << kChromium << " is not installed (tools/setup.sh installs the Debian package chromium)";
  rlp_test::TempDir d("report-canary");
  rlp_test::write_text(d / "canary.html",
                       "<!DOCTYPE html><html><body><p>x</p><script>console.error('rlp-canary'); "
                       "undefinedFn();</script></body></html>");
  const auto r = chromium("--dump-dom", "file://" + (d / "canary.html"), d, "canary");
  ASSERT_NE(r.out.find("<p>x</p>"), std::string::npos) << r.err;
  // The detector must see the deliberate errors, or a clean run of the real report proves nothing.
  const auto errors = console_errors(r.err);
  ASSERT_EQ(errors.size(), 2u) << r.err;
  EXPECT_NE(errors[0].find("rlp-canary"), std::string::npos);
  EXPECT_NE(errors[1].find("Uncaught"), std::string::npos);
}

TEST(ReportBrowser, ReportRendersWithoutErrors) {
  if (!fs::exists(kChromium))
    GTEST_SKIP() << kChromium << " is not installed (tools/setup.sh installs the Debian package chromium)";
  const std::string cli = rlp_test::cli_path();
  rlp_test::TempDir d("report-browser");
  const std::string run = d / "run.h5", base = d / "base.h5", html = d / "report.html";
  const std::string recipes = "bf16,fp8-gen,fp8-e2e,fp16";
  auto r = sh(
      rlp_test::shell_quote(cli) + " replay -q --out " + rlp_test::shell_quote(run) + " --recipes " + recipes,
      d, "replay");
  ASSERT_EQ(r.code, 0) << r.err;
  r = sh(rlp_test::shell_quote(cli) + " replay -q --pow2-scales --out " + rlp_test::shell_quote(base) +
             " --recipes " + recipes,
         d, "replay2");
  ASSERT_EQ(r.code, 0) << r.err;
  r = sh(rlp_test::shell_quote(cli) + " report -q " + rlp_test::shell_quote(run) + " -o " +
             rlp_test::shell_quote(html) + " --baseline " + rlp_test::shell_quote(base) + " --preset verl",
         d, "report");
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string page = rlp_test::read_text(html);
  const std::size_t plots = count(page, "<svg class=\"plot\"");
  ASSERT_GT(plots, 20u);

  // One load: the DOM after the script ran, and the screenshot (kept as the CI artifact).
  const fs::path shot_dir = fs::path(RLPARITY_SOURCE_DIR) / "reports";
  fs::create_directories(shot_dir);
  const std::string shot = (shot_dir / "report-screenshot.png").string();
  fs::remove(shot);
  const auto dom =
      chromium("--dump-dom --screenshot=" + rlp_test::shell_quote(shot), "file://" + html, d, "report");
  ASSERT_EQ(dom.code, 0) << dom.err;
  const auto errors = console_errors(dom.err);
  EXPECT_TRUE(errors.empty()) << errors.size() << " console messages, first: " << errors.front();
  // The script ran (data-ready); every plot is there with drawn data.
  EXPECT_NE(dom.out.find("data-ready=\"yes\""), std::string::npos) << "the page's script did not run";
  EXPECT_EQ(count(dom.out, "<svg class=\"plot\""), plots);
  EXPECT_EQ(count(dom.out, "<g class=\"data\">"), plots);
  EXPECT_EQ(count(dom.out, "<g class=\"data\"></g>"), 0u) << "a plot area without data";
  EXPECT_EQ(count(dom.out, "class=\"nodata\""), 0u);
  // The recipes' colours are visible in the screenshot (first four palette colours, one per
  // recipe in run order, drawn by the side-by-side plots near the top of the page).
  ASSERT_TRUE(fs::exists(shot)) << dom.err;
  Image img;
  std::string why;
  ASSERT_TRUE(decode_png(rlp_test::read_text(shot), img, why)) << why;
  EXPECT_EQ(img.width, 1400u);
  EXPECT_EQ(img.height, 3000u);
  // The first four palette colours (one per recipe, in run order) in the side-by-side plots.
  for (const char* c : {"#0072B2", "#D55E00", "#009E73", "#CC79A7"})
    EXPECT_GT(count_color(img, c), 300u) << c << " not drawn";
  // Not a blank page: plenty of non-background pixels.
  EXPECT_GT(img.px.size() - count_color(img, "#FFFFFF", 8) - count_color(img, "#F6F7F9", 3), 50000u);
}

}  // namespace
