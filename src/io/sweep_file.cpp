#include "rlparity/io/sweep_file.hpp"

#include <cmath>

#include "rlparity/io/h5_file.hpp"
#include "rlparity/util/atomic_file.hpp"
#include "rlparity/util/error.hpp"
#include "rlparity/util/version.hpp"

namespace rlp {

void write_sweep_file(const std::string& path, const SweepResult& sweep, const std::string& command_line,
                      const std::string& checkpoint_hash, bool force) {
  check_output_path(path, "sweep file", force);
  const auto P = static_cast<uint64_t>(sweep.points()), R = static_cast<uint64_t>(sweep.recipes.size());
  h5::write_file_atomic(path, "sweep file", [&](h5::Group& root) {
    root.write_attr_string("format", "rlparity-sweep");
    root.write_attr_string("tool_version", version());
    root.write_attr_string("command_line", command_line);
    root.write_attr_string("checkpoint_hash", checkpoint_hash);
    h5::Group g = root.create_group("sweep");
    g.write_dataset("knobs", sweep.knobs);
    g.write_dataset("values", sweep.values, {P, static_cast<uint64_t>(sweep.knobs.size())});
    g.write_dataset("recipes", sweep.recipes);
    h5::Group s = g.create_group("summary");
    for (const auto& [name, values] : sweep.summary) s.write_dataset(name, values, {P, R});
    s.close();
    h5::Group pos = g.create_group("position");
    pos.write_dataset("mean_abs_log_ratio", sweep.position_curve,
                      {P, R, static_cast<uint64_t>(sweep.positions)});
    pos.close();
    h5::Group b = g.create_group("boundaries");
    b.write_attr<int64_t>("window", sweep.boundary_options.window);
    b.write_attr<double>("z_threshold", sweep.boundary_options.z_threshold);
    b.write_attr<double>("min_jump", sweep.boundary_options.min_jump);
    std::vector<int64_t> point, recipe, position;
    std::vector<double> jump, z;
    for (const auto& pb : sweep.boundaries) {
      point.push_back(pb.point);
      recipe.push_back(pb.recipe);
      position.push_back(pb.b.position);
      jump.push_back(pb.b.jump);
      z.push_back(pb.b.z);
    }
    b.write_dataset("point", point);
    b.write_dataset("recipe", recipe);
    b.write_dataset("position", position);
    b.write_dataset("jump", jump);
    b.write_dataset("z", z);
    b.close();
    g.close();
  });
}

SweepResult read_sweep_file(const std::string& path) {
  SweepResult sw;
  h5::read_file(path, "sweep file", [&](h5::Group& root) {
    if (!root.has_link("sweep")) throw h5::H5Failure("not a sweep file (no /sweep group)");
    const h5::Group g = root.open_group("sweep");
    sw.knobs = g.read_string_dataset("knobs");
    sw.recipes = g.read_string_dataset("recipes");
    const uint64_t K = sw.knobs.size(), R = sw.recipes.size();
    if (K == 0 || R == 0) throw h5::H5Failure("/sweep/knobs and /sweep/recipes must not be empty");
    std::vector<uint64_t> shape;
    sw.values = g.read_string_dataset("values", shape);
    if (shape.size() != 2 || shape[1] != K)
      throw h5::H5Failure("/sweep/values is not (points, " + std::to_string(K) + " knobs)");
    const uint64_t P = shape[0];
    const h5::Group s = g.open_group("summary");
    for (const auto& name : s.links()) {
      sw.summary[name] = s.read_dataset<double>(name, shape);
      if (shape != std::vector<uint64_t>{P, R})
        throw h5::H5Failure("/sweep/summary/" + name + " is not (" + std::to_string(P) + " points, " +
                            std::to_string(R) + " recipes)");
      sw.statistics.push_back(name);
    }
    const h5::Group pos = g.open_group("position");
    sw.position_curve = pos.read_dataset<double>("mean_abs_log_ratio", shape);
    if (shape.size() != 3 || shape[0] != P || shape[1] != R)
      throw h5::H5Failure("/sweep/position/mean_abs_log_ratio is not (points, recipes, positions)");
    sw.positions = static_cast<std::size_t>(shape[2]);
    const h5::Group b = g.open_group("boundaries");
    sw.boundary_options.window = static_cast<int>(b.read_attr<int64_t>("window"));
    sw.boundary_options.z_threshold = b.read_attr<double>("z_threshold");
    sw.boundary_options.min_jump = b.read_attr<double>("min_jump");
    const auto point = b.read_dataset<int64_t>("point"), recipe = b.read_dataset<int64_t>("recipe"),
               position = b.read_dataset<int64_t>("position");
    const auto jump = b.read_dataset<double>("jump"), z = b.read_dataset<double>("z");
    const std::size_t n = point.size();
    if (recipe.size() != n || position.size() != n || jump.size() != n || z.size() != n)
      throw h5::H5Failure("/sweep/boundaries: its columns differ in length");
    for (std::size_t i = 0; i < n; ++i) {
      if (point[i] < 0 || static_cast<uint64_t>(point[i]) >= P || recipe[i] < 0 ||
          static_cast<uint64_t>(recipe[i]) >= R)
        throw h5::H5Failure("/sweep/boundaries row " + std::to_string(i) + " names no point or recipe");
      SweepResult::PointBoundary pb;
      pb.point = point[i];
      pb.recipe = recipe[i];
      pb.b.position = position[i];
      pb.b.jump = jump[i];
      pb.b.z = z[i];
      sw.boundaries.push_back(pb);
    }
  });
  return sw;
}

bool is_sweep_file(const std::string& path) {
  bool yes = false;
  try {
    h5::read_file(path, "sweep file", [&](h5::Group& root) { yes = root.has_link("sweep"); });
  } catch (const std::exception&) {
    return false;
  }
  return yes;
}

std::string sweep_point_label(const SweepResult& sweep, std::size_t p) {
  std::string s;
  const std::size_t K = sweep.knobs.size();
  for (std::size_t k = 0; k < K; ++k) s += (k ? " " : "") + sweep.knobs[k] + "=" + sweep.values[p * K + k];
  return s;
}

std::vector<RecipeResult> sweep_point_recipes(const SweepResult& sweep, std::size_t p) {
  const std::size_t R = sweep.recipes.size();
  std::vector<RecipeResult> out(R);
  for (std::size_t r = 0; r < R; ++r) {
    out[r].name = sweep.recipes[r];
    for (const auto& [name, values] : sweep.summary)
      if (!std::isnan(values[p * R + r]) || name == "num_tokens") out[r].summary[name] = values[p * R + r];
  }
  return out;
}

}  // namespace rlp
