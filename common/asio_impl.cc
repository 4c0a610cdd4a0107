// The one translation unit that compiles Boost.Asio's implementation
// (BOOST_ASIO_SEPARATE_COMPILATION is set project-wide to keep every other TU lighter).
#include <boost/asio/impl/src.hpp>
