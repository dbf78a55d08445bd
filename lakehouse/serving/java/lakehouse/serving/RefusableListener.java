package lakehouse.serving;

import org.sparkproject.connect.grpc.ForwardingServerCallListener.SimpleForwardingServerCallListener;
import org.sparkproject.connect.grpc.ServerCall;

/**
 * A Connect call's listener that passes nothing more on once its call is refused: the interceptor
 * that refuses closes the call in {@code onMessage} and sets {@link #refused}.
 */
abstract class RefusableListener<Q> extends SimpleForwardingServerCallListener<Q> {
  protected boolean refused;

  RefusableListener(ServerCall.Listener<Q> next) {
    super(next);
  }

  @Override
  public void onHalfClose() {
    if (!refused) {
      super.onHalfClose();
    }
  }

  @Override
  public void onReady() {
    if (!refused) {
      super.onReady();
    }
  }
}
