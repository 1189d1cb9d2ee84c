// The one place where made-up folder kinds are registered, in the order their folders appear.
// Adding a kind is one Provider in its own file plus its two lines here.
#include "zeromount/view/provider.h"

namespace zm::view {

std::unique_ptr<Provider> make_universal_provider();  // universal_provider.cpp
std::unique_ptr<Provider> make_params_provider();     // params_provider.cpp
std::unique_ptr<Provider> make_fp32_provider();       // weights_provider.cpp
std::unique_ptr<Provider> make_training_provider();   // weights_provider.cpp
std::unique_ptr<Provider> make_dcp_provider();        // dcp_provider.cpp
std::unique_ptr<Provider> make_status_provider();     // status_provider.cpp
std::unique_ptr<Provider> make_layouts_provider();    // layouts_provider.cpp
std::unique_ptr<Provider> make_report_provider();     // report_provider.cpp

const std::vector<std::unique_ptr<Provider>>& providers() {
  static const std::vector<std::unique_ptr<Provider>> all = [] {
    std::vector<std::unique_ptr<Provider>> v;
    v.push_back(make_universal_provider());
    v.push_back(make_params_provider());
    v.push_back(make_fp32_provider());
    v.push_back(make_training_provider());
    v.push_back(make_dcp_provider());
    v.push_back(make_status_provider());
    v.push_back(make_layouts_provider());
    v.push_back(make_report_provider());  // after params: it adds a page to <T>_params/
    return v;
  }();
  return all;
}

}  // namespace zm::view
