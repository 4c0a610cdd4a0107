// Boost.Asio's SSL implementation, compiled once. BOOST_ASIO_SEPARATE_COMPILATION (set project
// wide) moves it out of the headers; common/asio_impl.cc compiles only the core, because the
// NTS-KE client is the project's only TLS user. If another module starts using asio::ssl, move
// this include next to the core one in common/asio_impl.cc and delete this file.
#include <boost/asio/ssl/impl/src.hpp>
