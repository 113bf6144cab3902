// Small deterministic SVG plot writer (see include/rlparity/report/svg.hpp).
#include "rlparity/report/svg.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <limits>

namespace rlp::report {

namespace {

// Length of the valid UTF-8 sequence starting at s[i], or 0 if invalid.
std::size_t utf8_len(const std::string& s, std::size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  std::size_t n = 0;
  if (c >= 0xC2 && c <= 0xDF)
    n = 2;
  else if (c >= 0xE0 && c <= 0xEF)
    n = 3;
  else if (c >= 0xF0 && c <= 0xF4)
    n = 4;
  else
    return 0;
  if (i + n > s.size()) return 0;
  for (std::size_t k = 1; k < n; ++k)
    if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return 0;
  const auto c1 = static_cast<unsigned char>(s[i + 1]);
  if (c == 0xE0 && c1 < 0xA0) return 0;   // overlong
  if (c == 0xED && c1 >= 0xA0) return 0;  // surrogates
  if (c == 0xF0 && c1 < 0x90) return 0;   // overlong
  if (c == 0xF4 && c1 >= 0x90) return 0;  // > U+10FFFF
  return n;
}

// Pixel coordinate text: one decimal, never "-0.0".
std::string px(double v) {
  if (!std::isfinite(v)) v = 0;
  double r = std::round(v * 10.0) / 10.0;
  if (r == 0) r = 0;
  return fmt::format("{:.1f}", r);
}

struct Frame {
  double x0, x1, y0, y1;  // plot area in pixels (y0 top, y1 bottom)
  double xlo, xhi, ylo, yhi;
  bool xlog, ylog;

  static double norm(double v, double lo, double hi, bool log) {
    if (log) return (std::log10(v) - std::log10(lo)) / (std::log10(hi) - std::log10(lo));
    return (v - lo) / (hi - lo);
  }
  bool x_ok(double v) const { return std::isfinite(v) && (!xlog || v > 0); }
  bool y_ok(double v) const { return std::isfinite(v) && (!ylog || v > 0); }
  double X(double v) const { return x0 + std::clamp(norm(v, xlo, xhi, xlog), -0.02, 1.02) * (x1 - x0); }
  double Y(double v) const { return y1 - std::clamp(norm(v, ylo, yhi, ylog), -0.02, 1.02) * (y1 - y0); }
};

std::string axis_title(const Axis& a) { return a.unit.empty() ? a.label : a.label + " (" + a.unit + ")"; }

// Widen a degenerate range; for log, snap to whole decades.
Range finish_range(double lo, double hi, bool log) {
  if (log) {
    double l = std::floor(std::log10(lo)), h = std::ceil(std::log10(hi));
    if (h <= l) h = l + 1;
    return {std::pow(10.0, l), std::pow(10.0, h)};
  }
  if (hi <= lo) {
    const double pad = lo == 0 ? 1.0 : std::abs(lo) * 0.1;
    return {lo - pad, hi + pad};
  }
  return {lo, hi};
}

double nice_step(double span, int target) {
  const double raw = span / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double f = raw / mag;
  const double nf = f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10;
  return nf * mag;
}

// The opening of every plot: svg element, background, title, note, legend; returns the frame.
struct Canvas {
  std::string out;
  Frame f{};
};

Canvas open_plot(const PlotOptions& opt, const std::vector<std::pair<std::string, std::size_t>>& legend,
                 Range xr, Range yr, bool legend_as_boxes) {
  Canvas c;
  const double W = opt.width, H = opt.height;
  double top = 22;
  const double note_y = top + 10;
  if (!opt.note.empty()) top += 14;
  // Legend rows: items flow left to right and wrap.
  std::vector<std::array<double, 2>> pos;
  double lx = 72, ly = top + 10;
  for (const auto& [label, color] : legend) {
    const double w = 22 + 6.4 * static_cast<double>(label.size()) + 14;
    if (lx + w > W - 10 && lx > 72) {
      lx = 72;
      ly += 16;
    }
    pos.push_back({lx, ly});
    lx += w;
  }
  if (!legend.empty()) top = ly + 10;
  c.f = Frame{72, W - 18, top + 8, H - 46, xr.lo, xr.hi, yr.lo, yr.hi, opt.x.log, opt.y.log};
  auto& o = c.out;
  o += fmt::format(
      R"(<svg class="plot" data-plot="{}" width="{}" height="{}" viewBox="0 0 {} {}" role="img" aria-label="{}">)",
      xml_escape(opt.id), opt.width, opt.height, opt.width, opt.height, xml_escape(opt.title));
  o += "\n";
  o += fmt::format(R"(<rect class="bg" x="0" y="0" width="{}" height="{}"/>)", opt.width, opt.height);
  o += fmt::format(R"(<text class="title" x="72" y="16">{}</text>)", xml_escape(opt.title));
  if (!opt.note.empty())
    o += fmt::format(R"(<text class="note" x="72" y="{}">{}</text>)", px(note_y), xml_escape(opt.note));
  for (std::size_t i = 0; i < legend.size(); ++i) {
    const auto& [label, color] = legend[i];
    const auto& col = palette_color(color);
    if (legend_as_boxes)
      o += fmt::format(R"(<rect class="key" x="{}" y="{}" width="14" height="9" fill="{}"/>)", px(pos[i][0]),
                       px(pos[i][1] - 8), col);
    else
      o +=
          fmt::format(R"(<line class="key" x1="{}" y1="{}" x2="{}" y2="{}" stroke="{}" stroke-width="2.5"/>)",
                      px(pos[i][0]), px(pos[i][1] - 4), px(pos[i][0] + 16), px(pos[i][1] - 4), col);
    o += fmt::format(R"(<text class="legend" x="{}" y="{}">{}</text>)", px(pos[i][0] + 20), px(pos[i][1]),
                     xml_escape(label));
  }
  o += "\n";
  return c;
}

void draw_axes(Canvas& c, const PlotOptions& opt, bool x_ticks = true, bool y_ticks = true) {
  const Frame& f = c.f;
  auto& o = c.out;
  o += "<g class=\"axes\">";
  for (double t : y_ticks ? axis_ticks(f.ylo, f.yhi, f.ylog) : std::vector<double>{}) {
    const double y = f.Y(t);
    o += fmt::format(R"(<line class="grid" x1="{}" y1="{}" x2="{}" y2="{}"/>)", px(f.x0), px(y), px(f.x1),
                     px(y));
    o += fmt::format(R"(<text class="tick" x="{}" y="{}" text-anchor="end">{}</text>)", px(f.x0 - 5),
                     px(y + 3.5), format_sig(t, 3));
  }
  if (x_ticks) {
    for (double t : axis_ticks(f.xlo, f.xhi, f.xlog)) {
      const double x = f.X(t);
      o += fmt::format(R"(<line class="tickmark" x1="{}" y1="{}" x2="{}" y2="{}"/>)", px(x), px(f.y1), px(x),
                       px(f.y1 + 4));
      o += fmt::format(R"(<text class="tick" x="{}" y="{}" text-anchor="middle">{}</text>)", px(x),
                       px(f.y1 + 15), format_sig(t, 3));
    }
  }
  o += fmt::format(R"(<line class="axis" x1="{}" y1="{}" x2="{}" y2="{}"/>)", px(f.x0), px(f.y1), px(f.x1),
                   px(f.y1));
  o += fmt::format(R"(<line class="axis" x1="{}" y1="{}" x2="{}" y2="{}"/>)", px(f.x0), px(f.y0), px(f.x0),
                   px(f.y1));
  o += fmt::format(R"(<text class="axis-label" x="{}" y="{}" text-anchor="middle">{}</text>)",
                   px((f.x0 + f.x1) / 2), px(f.y1 + 36), xml_escape(axis_title(opt.x)));
  o += fmt::format(
      R"svg(<text class="axis-label" x="0" y="0" text-anchor="middle" transform="translate(14 {}) rotate(-90)">{}</text>)svg",
      px((f.y0 + f.y1) / 2), xml_escape(axis_title(opt.y)));
  o += "</g>\n";
}

std::string no_data_plot(const PlotOptions& opt, const std::string& why) {
  Canvas c = open_plot(opt, {}, {0, 1}, {0, 1}, false);
  c.out += fmt::format(R"(<text class="nodata" x="{}" y="{}" text-anchor="middle">{}</text>)", opt.width / 2,
                       opt.height / 2, xml_escape(why));
  c.out += "</svg>\n";
  return c.out;
}

Range resolve(const Axis& a, std::optional<Range> data) {
  Range r = data.value_or(Range{a.log ? 1.0 : 0.0, a.log ? 10.0 : 1.0});
  if (a.min) r.lo = *a.min;
  if (a.max) r.hi = *a.max;
  if (a.log && (r.lo <= 0 || r.hi <= r.lo))
    r = finish_range(r.lo > 0 ? r.lo : 1e-12, std::max(r.hi, r.lo > 0 ? r.lo * 10 : 1.0), true);
  if (!a.log && r.hi <= r.lo) r = finish_range(r.lo, r.hi, false);
  return r;
}

}  // namespace

std::string xml_escape(const std::string& s) {
  std::string o;
  o.reserve(s.size() + 8);
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      const std::size_t n = utf8_len(s, i);
      if (n == 0) {
        o += '?';
        ++i;
      } else {
        o.append(s, i, n);
        i += n;
      }
      continue;
    }
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      case '\'': o += "&#39;"; break;
      default:
        if (c < 0x20 && c != '\t' && c != '\n' && c != '\r')
          o += '?';
        else
          o += static_cast<char>(c);
    }
    ++i;
  }
  return o;
}

std::string format_exact(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  std::array<char, 64> buf{};
  auto res = std::to_chars(buf.data(), buf.data() + buf.size(), v);
  return std::string(buf.data(), res.ptr);
}

std::string format_sig(double v, int sig) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == 0) return "0";
  std::string s = fmt::format("{:.{}g}", v, sig);
  // Strip trailing zeros of the mantissa and tidy the exponent ("1.50e-07" -> "1.5e-7").
  std::string mant = s, exp;
  if (auto e = s.find('e'); e != std::string::npos) {
    mant = s.substr(0, e);
    exp = s.substr(e + 1);
  }
  if (mant.find('.') != std::string::npos) {
    while (!mant.empty() && mant.back() == '0') mant.pop_back();
    if (!mant.empty() && mant.back() == '.') mant.pop_back();
  }
  if (exp.empty()) return mant;
  std::string sign;
  if (exp[0] == '+' || exp[0] == '-') {
    if (exp[0] == '-') sign = "-";
    exp = exp.substr(1);
  }
  while (exp.size() > 1 && exp[0] == '0') exp.erase(0, 1);
  return mant + "e" + sign + exp;
}

const std::string& palette_color(std::size_t index) {
  static const std::array<std::string, 8> colors = {"#0072B2", "#D55E00", "#009E73", "#CC79A7",
                                                    "#E69F00", "#56B4E9", "#7F7F7F", "#000000"};
  return colors[index % colors.size()];
}

std::uint64_t Bins::total() const {
  double s = 0;
  for (double c : counts) s += c;
  return static_cast<std::uint64_t>(s);
}

Bins bin_values(const std::vector<double>& values, double lo, double hi, int nbins, bool log) {
  Bins b;
  if (nbins < 1) nbins = 1;
  const auto n = static_cast<std::size_t>(nbins);
  b.edges.resize(n + 1);
  b.counts.assign(n, 0.0);
  const double a = log ? std::log10(lo) : lo, z = log ? std::log10(hi) : hi;
  for (std::size_t i = 0; i <= n; ++i) {
    const double t = a + (z - a) * static_cast<double>(i) / static_cast<double>(n);
    b.edges[i] = log ? std::pow(10.0, t) : t;
  }
  b.edges.front() = lo;
  b.edges.back() = hi;
  for (double v : values) {
    if (std::isnan(v)) {
      ++b.nan;
      continue;
    }
    if (log && v <= 0) {
      ++b.nonpositive;
      continue;
    }
    if (v < lo) {
      ++b.below;
      continue;
    }
    if (v > hi) {
      ++b.above;
      continue;
    }
    const double t = log ? std::log10(v) : v;
    auto k = static_cast<std::ptrdiff_t>(std::floor((t - a) / (z - a) * static_cast<double>(n)));
    k = std::clamp<std::ptrdiff_t>(k, 0, static_cast<std::ptrdiff_t>(n) - 1);
    // Correct rounding at the edges so bin k holds edges[k] <= v < edges[k+1].
    auto ku = static_cast<std::size_t>(k);
    if (ku > 0 && v < b.edges[ku])
      --ku;
    else if (ku + 1 < n && v >= b.edges[ku + 1])
      ++ku;
    b.counts[ku] += 1;
  }
  return b;
}

std::optional<Range> data_range(const std::vector<const std::vector<double>*>& arrays, bool log) {
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (const auto* a : arrays)
    for (double v : *a) {
      if (!std::isfinite(v) || (log && v <= 0)) continue;
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
  if (!(lo <= hi)) return std::nullopt;
  return finish_range(lo, hi, log);
}

Series cdf_series(const std::vector<double>& values, std::size_t max_points, bool log_x) {
  std::vector<double> v;
  v.reserve(values.size());
  for (double x : values)
    if (!std::isnan(x) && (!log_x || x > 0)) v.push_back(x);
  std::sort(v.begin(), v.end());
  Series s;
  const std::size_t n = v.size();
  if (n == 0) return s;
  // y = fraction of *all non-NaN values* <= x, so dropped non-positive values still count.
  std::size_t dropped = 0;
  for (double x : values)
    if (!std::isnan(x) && log_x && x <= 0) ++dropped;
  const double total = static_cast<double>(n + dropped);
  if (max_points < 2) max_points = 2;
  const std::size_t m = std::min(n, max_points);
  for (std::size_t i = 0; i < m; ++i) {
    const std::size_t rank = m == 1 ? n : 1 + (i * (n - 1)) / (m - 1);  // 1-based, 1 .. n
    s.x.push_back(v[rank - 1]);
    s.y.push_back(static_cast<double>(rank + dropped) / total);
  }
  return s;
}

std::vector<double> axis_ticks(double lo, double hi, bool log) {
  std::vector<double> t;
  if (!(hi > lo)) return t;
  if (log) {
    if (lo <= 0) return t;
    const double l = std::log10(lo), h = std::log10(hi);
    const auto d0 = static_cast<int>(std::ceil(l - 1e-9)), d1 = static_cast<int>(std::floor(h + 1e-9));
    if (h - l >= 1.5) {
      const int decades = d1 - d0 + 1;
      const int every = decades > 8 ? (decades + 7) / 8 : 1;
      for (int d = d0; d <= d1; ++d)
        if ((d - d0) % every == 0) t.push_back(std::pow(10.0, d));
      return t;
    }
    for (int d = d0 - 1; d <= d1; ++d)
      for (double m : {1.0, 2.0, 5.0}) {
        const double v = m * std::pow(10.0, d);
        if (v >= lo * (1 - 1e-9) && v <= hi * (1 + 1e-9)) t.push_back(v);
      }
    if (t.size() >= 3) return t;
    t.clear();
  }
  const double step = nice_step(hi - lo, 5);
  const double first = std::ceil(lo / step - 1e-9) * step;
  for (int i = 0; i < 50; ++i) {
    double v = first + step * i;
    if (v > hi + step * 1e-9) break;
    if (std::abs(v) < step * 1e-9) v = 0;
    t.push_back(v);
  }
  return t;
}

std::string line_plot(const PlotOptions& opt, const std::vector<Series>& series) {
  std::vector<const std::vector<double>*> xs, ys;
  for (const auto& s : series) {
    xs.push_back(&s.x);
    ys.push_back(&s.y);
  }
  const auto xd = data_range(xs, opt.x.log), yd = data_range(ys, opt.y.log);
  if (!xd || !yd) return no_data_plot(opt, "no data");
  std::vector<std::pair<std::string, std::size_t>> legend;
  for (const auto& s : series) legend.emplace_back(s.label, s.color);
  Canvas c = open_plot(opt, legend, resolve(opt.x, xd), resolve(opt.y, yd), false);
  draw_axes(c, opt);
  const Frame& f = c.f;
  c.out += "<g class=\"data\">";
  for (const auto& s : series) {
    std::string d;
    bool pen = false;
    const std::size_t n = std::min(s.x.size(), s.y.size());
    for (std::size_t i = 0; i < n; ++i) {
      if (!f.x_ok(s.x[i]) || !f.y_ok(s.y[i])) {
        pen = false;
        continue;
      }
      const double X = f.X(s.x[i]), Y = f.Y(s.y[i]);
      if (!pen)
        d += fmt::format(" M{} {}", px(X), px(Y));
      else if (s.step)
        d += fmt::format(" V{}", px(Y));
      else
        d += fmt::format(" L{} {}", px(X), px(Y));
      if (s.step && i + 1 < n && f.x_ok(s.x[i + 1]) && f.y_ok(s.y[i + 1]))
        d += fmt::format(" H{}", px(f.X(s.x[i + 1])));
      pen = true;
    }
    if (!d.empty()) d.erase(0, 1);
    c.out += fmt::format(
        R"(<path class="series" data-series="{}" d="{}" fill="none" stroke="{}" stroke-width="1.8"/>)",
        xml_escape(s.label), d, palette_color(s.color));
  }
  c.out += "</g>\n</svg>\n";
  return c.out;
}

std::string histogram_plot(const PlotOptions& opt, const std::vector<HistSeries>& series) {
  if (series.empty() || series[0].bins.counts.empty()) return no_data_plot(opt, "no data");
  const auto& edges = series[0].bins.edges;
  double maxc = 0;
  for (const auto& s : series)
    for (double c : s.bins.counts) maxc = std::max(maxc, c);
  if (maxc <= 0) return no_data_plot(opt, "no data in range");
  Range yr =
      opt.y.log ? Range{0.5, std::pow(10.0, std::ceil(std::log10(maxc * 1.5)))} : Range{0, maxc * 1.08};
  if (opt.y.max) yr.hi = *opt.y.max;
  std::vector<std::pair<std::string, std::size_t>> legend;
  for (const auto& s : series) legend.emplace_back(s.label, s.color);
  Canvas c = open_plot(opt, legend, Range{edges.front(), edges.back()}, yr, true);
  draw_axes(c, opt);
  const Frame& f = c.f;
  const double base = f.y1;
  auto ypix = [&](double v) { return v > 0 && (!f.ylog || v >= yr.lo) ? f.Y(v) : base; };
  c.out += "<g class=\"data\">";
  if (series.size() == 1) {
    const auto& s = series[0];
    c.out += fmt::format(R"(<g data-series="{}" fill="{}">)", xml_escape(s.label), palette_color(s.color));
    for (std::size_t i = 0; i < s.bins.counts.size(); ++i) {
      const double cnt = s.bins.counts[i];
      if (cnt <= 0) continue;
      const double xa = f.X(s.bins.edges[i]), xb = f.X(s.bins.edges[i + 1]), y = ypix(cnt);
      c.out += fmt::format(R"(<rect x="{}" y="{}" width="{}" height="{}"><title>[{}, {}): {}</title></rect>)",
                           px(xa), px(y), px(std::max(0.5, xb - xa - 0.6)), px(std::max(0.8, base - y)),
                           format_sig(s.bins.edges[i], 4), format_sig(s.bins.edges[i + 1], 4),
                           format_sig(cnt, 12));
    }
    c.out += "</g>";
  } else {
    for (const auto& s : series) {
      std::string d = fmt::format("M{} {}", px(f.X(s.bins.edges[0])), px(base));
      for (std::size_t i = 0; i < s.bins.counts.size(); ++i) {
        const double y = ypix(s.bins.counts[i]);
        d += fmt::format(" V{} H{}", px(y), px(f.X(s.bins.edges[i + 1])));
      }
      d += fmt::format(" V{}", px(base));
      c.out += fmt::format(
          R"(<path class="series" data-series="{}" d="{}" fill="{}" fill-opacity="0.08" stroke="{}" stroke-width="1.6"/>)",
          xml_escape(s.label), d, palette_color(s.color), palette_color(s.color));
    }
  }
  c.out += "</g>\n</svg>\n";
  return c.out;
}

std::string bar_chart(const PlotOptions& opt, const std::vector<std::string>& categories,
                      const std::vector<BarSeries>& series) {
  std::vector<const std::vector<double>*> ys;
  for (const auto& s : series) ys.push_back(&s.values);
  auto yd = data_range(ys, opt.y.log);
  if (categories.empty() || series.empty() || !yd) return no_data_plot(opt, "no data");
  Range yr = resolve(opt.y, yd);
  if (!opt.y.log) {
    yr.lo = std::min(0.0, yr.lo);
    yr.hi = yr.hi * 1.05;
  }
  std::vector<std::pair<std::string, std::size_t>> legend;
  for (const auto& s : series) legend.emplace_back(s.label, s.color);
  Canvas c = open_plot(opt, legend, Range{0, static_cast<double>(categories.size())}, yr, true);
  draw_axes(c, opt, false);
  const Frame& f = c.f;
  const double band = (f.x1 - f.x0) / static_cast<double>(categories.size());
  const double inner = band * 0.8, bw = inner / static_cast<double>(series.size());
  // Category labels (thinned when there are many).
  const std::size_t every = categories.size() > 24 ? (categories.size() + 23) / 24 : 1;
  c.out += "<g class=\"axes\">";
  for (std::size_t k = 0; k < categories.size(); k += every)
    c.out += fmt::format(R"(<text class="tick" x="{}" y="{}" text-anchor="middle">{}</text>)",
                         px(f.x0 + band * (static_cast<double>(k) + 0.5)), px(f.y1 + 15),
                         xml_escape(categories[k]));
  c.out += "</g>\n<g class=\"data\">";
  const double base = f.ylog ? f.y1 : f.Y(std::max(0.0, yr.lo));
  for (std::size_t j = 0; j < series.size(); ++j) {
    const auto& s = series[j];
    c.out += fmt::format(R"(<g data-series="{}" fill="{}">)", xml_escape(s.label), palette_color(s.color));
    for (std::size_t k = 0; k < categories.size() && k < s.values.size(); ++k) {
      const double v = s.values[k];
      if (!f.y_ok(v)) continue;
      const double x =
          f.x0 + band * static_cast<double>(k) + (band - inner) / 2 + bw * static_cast<double>(j);
      const double y = f.Y(v);
      const double top = std::min(y, base), h = std::max(0.8, std::abs(base - y));
      c.out += fmt::format(R"(<rect x="{}" y="{}" width="{}" height="{}"><title>{} {}: {}</title></rect>)",
                           px(x), px(top), px(std::max(0.5, bw - 0.6)), px(h), xml_escape(s.label),
                           xml_escape(categories[k]), format_exact(v));
    }
    c.out += "</g>";
  }
  c.out += "</g>\n</svg>\n";
  return c.out;
}

std::string heatmap_plot(const PlotOptions& opt, int rows, int cols, const std::vector<double>& values,
                         double lo, double hi, bool log_scale, const std::vector<int>& marks) {
  if (rows <= 0 || cols <= 0 ||
      values.size() != static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols) || !(hi > lo) ||
      (log_scale && !(lo > 0)))
    return no_data_plot(opt, "no data");
  // A sequential scale, light (small) to dark red (large): ColorBrewer YlOrRd, 9 classes.
  static const char* const kScale[] = {"#ffffcc", "#ffeda0", "#fed976", "#feb24c", "#fd8d3c",
                                       "#fc4e2a", "#e31a1c", "#bd0026", "#800026"};
  constexpr int kLevels = 9;
  auto level = [&](double v) {
    if (std::isnan(v)) return -1;
    if (v <= lo || (log_scale && v <= 0)) return 0;
    const double t = Frame::norm(v, lo, hi, log_scale);
    return std::clamp(static_cast<int>(t * kLevels), 0, kLevels - 1);
  };
  Canvas c =
      open_plot(opt, {}, Range{0, static_cast<double>(cols)}, Range{0, static_cast<double>(rows)}, false);
  c.f.x1 -= 64;  // room for the colour bar
  draw_axes(c, opt, true, false);
  const Frame& f = c.f;
  const double cw = (f.x1 - f.x0) / cols, ch = (f.y1 - f.y0) / rows;
  // Row labels at the rows' centres (every k-th when the rows are too thin for all).
  c.out += "<g class=\"axes\">";
  for (int r = 0, every = std::max(1, static_cast<int>(std::ceil(11.0 / ch))); r < rows; r += every)
    c.out += fmt::format(R"(<text class="tick" x="{}" y="{}" text-anchor="end">{}</text>)", px(f.x0 - 5),
                         px(f.y1 - (r + 0.5) * ch + 3.5), r);
  c.out += "</g>";
  c.out += "<g class=\"data\">";
  for (int r = 0; r < rows; ++r) {
    const double y = f.y1 - (r + 1) * ch;
    for (int c0 = 0; c0 < cols;) {
      const int lv = level(values[static_cast<std::size_t>(r) * static_cast<std::size_t>(cols) +
                                  static_cast<std::size_t>(c0)]);
      int c1 = c0 + 1;
      while (c1 < cols && level(values[static_cast<std::size_t>(r) * static_cast<std::size_t>(cols) +
                                       static_cast<std::size_t>(c1)]) == lv)
        ++c1;
      if (lv >= 0)
        c.out += fmt::format(R"(<rect x="{}" y="{}" width="{}" height="{}" fill="{}"/>)", px(f.x0 + c0 * cw),
                             px(y), px((c1 - c0) * cw), px(ch), kScale[lv]);
      c0 = c1;
    }
  }
  std::string d;
  for (int col = 0; col < cols && col < static_cast<int>(marks.size()); ++col) {
    const int r = marks[static_cast<std::size_t>(col)];
    if (r < 0 || r >= rows) continue;
    d += fmt::format("M{} {}h{}v{}h{}z", px(f.x0 + col * cw), px(f.y1 - (r + 1) * ch), px(cw), px(ch),
                     px(-cw));
  }
  if (!d.empty())
    c.out += fmt::format(R"(<path class="marks" d="{}" fill="none" stroke="#000" stroke-width="1"/>)", d);
  c.out += "</g>\n<g class=\"colorbar\">";
  const double bx = f.x1 + 18, bh = (f.y1 - f.y0) / kLevels;
  for (int k = 0; k < kLevels; ++k)
    c.out += fmt::format(R"(<rect x="{}" y="{}" width="12" height="{}" fill="{}"/>)", px(bx),
                         px(f.y1 - (k + 1) * bh), px(bh), kScale[k]);
  c.out +=
      fmt::format(R"(<text class="tick" x="{}" y="{}">{}</text>)", px(bx + 15), px(f.y1), format_sig(lo, 2));
  c.out += fmt::format(R"(<text class="tick" x="{}" y="{}">{}</text>)", px(bx + 15), px(f.y0 + 8),
                       format_sig(hi, 2));
  c.out += "</g>\n</svg>\n";
  return c.out;
}

}  // namespace rlp::report
