// Boost.Asio's SSL implementation, compiled once for the whole program (BOOST_ASIO_SEPARATE_
// COMPILATION is set project wide; asio_impl.cc compiles the core). Users: RedisConnection's TLS
// (common/tls.h) and the NTS-KE client (clock/nts_ke.cc).
#include <boost/asio/ssl/impl/src.hpp>
